"""The ops of bench/ops_survey.exs in PyTorch (2 threads), on the same shapes (N x N, N from the environment, 1000 by default): one line per op,
`name microseconds`, the median of batches timed the way Cascade.Bench.Timer times them."""
import torch, time, sys, os
torch.set_num_threads(2)
g=torch.Generator().manual_seed(0)
N=int(os.environ.get("N","1000"))
x=torch.rand(N,N,generator=g)*2-1; y=torch.rand(N,N,generator=g)*2-1
p=x.abs()+0.5; row=torch.rand(N,generator=g)*2-1; mask=x<y
idx=torch.arange(0,N-N%2,2); v=x.reshape(-1)
F=torch.nn.functional
cases=dict(neg=lambda: -x, abs=lambda: x.abs(), sign=lambda: x.sign(), exp=lambda: x.exp(), expm1=lambda: x.expm1(),
 log=lambda: p.log(), log1p=lambda: p.log1p(), sqrt=lambda: p.sqrt(), rsqrt=lambda: p.rsqrt(), sin=lambda: x.sin(), cos=lambda: x.cos(),
 tanh=lambda: x.tanh(), sigmoid=lambda: x.sigmoid(), erf=lambda: x.erf(), atan=lambda: x.atan(), floor=lambda: x.floor(), round=lambda: x.round(),
 reciprocal=lambda: p.reciprocal(), add=lambda: x+y, sub=lambda: x-y, mul=lambda: x*y, div=lambda: x/p, pow=lambda: p.pow(y),
 maximum=lambda: torch.maximum(x,y), remainder=lambda: torch.remainder(x,p), atan2=lambda: torch.atan2(x,y), less=lambda: x<y, equal=lambda: x==y,
 where=lambda: torch.where(mask,x,y), clip=lambda: x.clamp(-0.5,0.5), add_row=lambda: x+row, add_scalar=lambda: x+1.0,
 sum_ax1=lambda: x.sum(1), sum_ax0=lambda: x.sum(0), max_ax1=lambda: x.amax(1), max_all=lambda: x.max(), argmax_ax1=lambda: x.argmax(1),
 mean_ax1=lambda: x.mean(1), var_ax1=lambda: x.var(1, unbiased=False), transpose=lambda: x.t().contiguous(), slice=lambda: x[:,N//10:N-N//10].contiguous(),
 concat0=lambda: torch.cat([x,y],0), concat1=lambda: torch.cat([x,y],1), reverse=lambda: x.flip(1), pad=lambda: F.pad(x,(1,1,1,1)),
 take_rows=lambda: x.index_select(0,idx), relu=lambda: x.relu(), leaky_relu=lambda: F.leaky_relu(x), elu=lambda: F.elu(x), silu=lambda: F.silu(x),
 softplus=lambda: F.softplus(x), log_softmax=lambda: x.log_softmax(1), logsumexp=lambda: x.logsumexp(1), sort_ax1=lambda: x.sort(1),
 to_s32=lambda: x.to(torch.int32), to_f64=lambda: x.double(), sum_1d=lambda: v.sum())
sec=float(os.environ.get("SEC","0.3"))
only=os.environ.get("ONLY")
for k,f in cases.items():
    if only and k not in only.split(","): continue
    f(); n=1; samples=[]; t_start=time.perf_counter()
    while True:
        t0=time.perf_counter()
        for _ in range(n): f()
        dt=(time.perf_counter()-t0)/n; samples.append(dt)
        if dt*n<0.05: n*=4
        if time.perf_counter()-t_start>sec and len(samples)>=3: break
    samples.sort(); print(k, round(samples[len(samples)//2]*1e6,1))
