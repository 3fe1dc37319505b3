"""What python/torch_ext is built against, for CMake: one line each of torch.__version__,
torch.version.cuda ("none" for a CPU-only torch), torch's folder and its C++ ABI flag. Exits
nonzero when torch does not import."""
import os

import torch

print(torch.__version__)
print(torch.version.cuda or "none")
print(os.path.dirname(torch.__file__))
print(int(torch._C._GLIBCXX_USE_CXX11_ABI))
