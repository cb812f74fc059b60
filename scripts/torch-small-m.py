# The action expert's 64-row products (and two decode GEMV shapes) through PyTorch's cuBLAS
# and cuBLASLt, replayed from CUDA graphs: what cuBLAS reaches for these shapes without
# vlanode's rounding of x (bench/results/cuda-kernels.md, run 7). Run on the GPU machine:
#   python3 scripts/torch-small-m.py
import torch, time
torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
dev = 'cuda'
shapes = [(64,8256,2048),(64,2048,2048),(64,1024,2048),(64,2048,8256),(64,4096,2048),(64,16512,2048),(1,4096,4096),(1,12288,4096)]
def bench(fn, n=200):
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        for _ in range(3): fn()
    torch.cuda.synchronize()
    with torch.cuda.graph(g):
        for _ in range(20): fn()
    g.replay(); torch.cuda.synchronize()
    e0 = torch.cuda.Event(enable_timing=True); e1 = torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(n//20): g.replay()
    e1.record(); torch.cuda.synchronize()
    return e0.elapsed_time(e1)*1000/n
for lib in ['cublas','cublaslt']:
    torch.backends.cuda.preferred_blas_library(lib)
    for (M,N,K) in shapes:
        x = torch.randn(M,K,device=dev,dtype=torch.bfloat16)
        ws = [torch.randn(N,K,device=dev,dtype=torch.bfloat16) for _ in range(8)]
        i=[0]
        def f():
            i[0]=(i[0]+1)%8
            return torch.nn.functional.linear(x, ws[i[0]])
        us = bench(f)
        print(f"{lib} {M}x{N}x{K}: {us:.1f} us  {N*K*2/us/1e6:.2f} TB/s", flush=True)
# batched gate/up as bmm
torch.backends.cuda.preferred_blas_library('cublas')
for (N,K,B) in [(8256,2048,2),(1024,2048,2),(2048,2048,2)]:
    x = torch.randn(B,64,K,device=dev,dtype=torch.bfloat16)
    w = torch.randn(B,K,N,device=dev,dtype=torch.bfloat16)
    us = bench(lambda: torch.bmm(x,w))
    print(f"bmm B={B} 64x{N}x{K}: {us:.1f} us {B*N*K*2/us/1e6:.2f} TB/s", flush=True)
