# dev/gpu_counts.py — analytic flops and DRAM bytes of the GPU fused SSD forward (docs/gpu.md §4).
# Run: python3 dev/gpu_counts.py. Paper/notes figures only (H200: 4.3 TB/s, 67 TFLOP/s FP32); nothing measured.
# flops and DRAM bytes (unique tensor traffic, float32) of the fused forward's five launches at Q=64
def counts(B,L,H,P,N,G,Q=64):
    K=-(-L//Q); nc=B*K; f=4
    r={}
    r['chunk_cumsum']=(B*H*L*10, f*(B*L*H + 2*H*nc*Q))
    r['bmm_chunk']=(2*nc*G*Q*Q*N, f*(2*B*L*G*N + nc*G*Q*Q))
    r['chunk_state']=(2*nc*H*Q*P*N, f*(B*L*H*P + B*L*G*N + 2*H*nc*Q + nc*H*P*N))
    r['state_passing']=(2*nc*H*P*N, f*(2*nc*H*P*N + H*nc + 2*B*H*P*N))
    r['chunk_scan']=(nc*H*(Q*Q*P + 2*Q*N*P), f*(nc*G*Q*Q + 3*B*L*H*P + B*L*G*N + nc*H*P*N + 2*H*nc*Q))
    return r
shapes={'tiny':(1,128,2,64,64,1),'seq_4096':(8,4096,32,64,128,8),'heavy_h256':(8,4096,256,64,64,64),'headdim_16':(2,1024,16,16,64,4)}
ridge=67e12/4.3e12
print("ridge fp32 SIMT flop/B = %.1f"%ridge)
for n,(B,L,H,P,N,G) in shapes.items():
    r=counts(B,L,H,P,N,G); tf=sum(v[0] for v in r.values()); tb=sum(v[1] for v in r.values())
    print(n,[B,L,H,P,N,64,G])
    for k,(fl,by) in r.items():
        ai=fl/by; tc=fl/67e12; tm=by/4.3e12
        print("  %-14s %9.3f GFLOP %9.3f GB  %6.2f flop/B  %s-bound  t>=%.3f ms"%(k,fl/1e9,by/1e9,ai,'compute' if ai>ridge else 'memory',max(tc,tm)*1e3))
    print("  total %.3f GFLOP %.3f GB; time bound %.3f ms"%(tf/1e9,tb/1e9,sum(max(v[0]/67e12,v[1]/4.3e12) for v in r.values())*1e3))
