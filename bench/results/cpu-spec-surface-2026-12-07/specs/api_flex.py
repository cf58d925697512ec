import time, torch, cubridge
from torch.nn.attention.flex_attention import create_block_mask
B,H,S,D=1,4,256,64
q=torch.randn(B,H,S,D,dtype=torch.bfloat16); k=torch.randn_like(q); v=torch.randn_like(q)
bias = torch.randn(H)
def sm(score,b,h,qi,ki): return score + bias[h]
def causal(b,h,qi,ki): return qi>=ki
bm = create_block_mask(causal, B, None, S, S, device="cpu")
try:
    out = cubridge.flex_attention(q,k,v,score_mod=sm,block_mask=bm)
    print("returned", out.shape)
except Exception as e:
    import traceback; traceback.print_exc()
