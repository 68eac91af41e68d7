import torch

print("hello from train.py", torch.__version__)
