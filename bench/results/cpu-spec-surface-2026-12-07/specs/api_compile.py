import sys, time, torch, cubridge
t=time.time()
try:
    att = cubridge.compile("/tmp/wtr_specs/hd64_window.py", out="/tmp/wtr_runs/api_compile")
    print("returned", att)
except Exception as e:
    import traceback; traceback.print_exc()
print("elapsed", time.time()-t)
