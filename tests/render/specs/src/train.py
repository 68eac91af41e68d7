import torch

print("hello from train.py")
