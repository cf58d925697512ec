import torch, functools
from torch.nn.attention.flex_attention import or_masks
from cubridge.spec import from_mods, check_spec
from cubridge.transfer.rules import transfer_by_rules
def causal(b,h,qi,ki): return qi>=ki
def win(b,h,qi,ki,*,w): return qi-ki<w
mm = or_masks(functools.partial(win, w=128), lambda b,h,q,k: k<4)
for args in [dict(mask_mod=mm), dict(score_mod=lambda s,b,h,q,k: s*2)]:
    try:
        spec = from_mods(**args)
        print("spec", spec.name, spec.configs, spec.dtypes)
        print(check_spec(spec))
    except Exception as e:
        import traceback; traceback.print_exc()
