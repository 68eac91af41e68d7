
print("hello from train.py")
