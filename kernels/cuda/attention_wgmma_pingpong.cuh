// Ping-pong scheduling of the fa3 kernel's two consumer warpgroups (FlashAttention-3's inter-warpgroup overlap): the
// warpgroups take turns on the tensor cores, one issuing its GEMMs while the other runs its softmax, then they swap.
//
// Pasted after attention_wgmma.cuh only for a configuration with pingpong = 1 (families/wgmma.py), so that the source
// of every other configuration stays what it was. The generated source names its tile Fa3Pingpong<Fa3<...>> and
// specialises fa3_consume for it as fa3_consume_pingpong: fa3_forward, the producer and the epilogue are unchanged.
//
// A turn is the run of GEMM issues between two softmaxes of one warpgroup, for key blocks j = 0 .. n - 1 (n > 0):
//   turn 0        S_0 = Q·K_0ᵀ
//   turn t        O += P_{t-1}·V_{t-1} and S_t = Q·K_tᵀ (1 <= t < n): without OVERLAP P·V is issued, waited for
//                 and its slot released, then S_t issued (P's and S's registers never live at once: the
//                 registers of the schedule without ping-pong); with OVERLAP both are issued together, as fa3_consume
//                 does, and P·V still runs during the softmax that follows
//   turn n        O += P_{n-1}·V_{n-1}
// so each warpgroup has n + 1 turns. n >= 1 (a block's last row sees a key: causal L_q > L_k is refused by the problem);
// n = 0 would have no turns at all, and the loop below returns before any barrier then.
#pragma once

#include "attention_wgmma.cuh"

namespace tracea {

// A tile whose two consumer warpgroups take turns (fa3_consume_pingpong instead of fa3_consume).
template <class F> struct Fa3Pingpong : F {
  static constexpr bool PINGPONG = true;
  static_assert(F::CONSUMERS == 2, "ping-pong orders two consumer warpgroups");
};

// Named barriers of the two consumer warpgroups' 256 threads. Barrier 0 is __syncthreads (the kernel's start); the
// GEMM kernel's epilogue uses 1 + consumer (gemm_wgmma.cuh named_sync, not in this kernel but kept clear of).
constexpr unsigned kTurnBarrier0 = 3;  // consumer c waits on kTurnBarrier0 + c before its turn
constexpr unsigned kTurnThreads = 256;

__device__ __forceinline__ void turn_sync(unsigned id) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "n"(kTurnThreads) : "memory");
}
__device__ __forceinline__ void turn_arrive(unsigned id) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "n"(kTurnThreads) : "memory");
}

// Whose turn it is. Deadlock safety and balance (n key blocks, the same n for both warpgroups: b.blocks_n is the
// CTA's, and both consumers must consume every key block, since each slot's empty barrier waits for both; with causal
// masking warpgroup 0's rows see fewer keys, and its blocks past its own diagonal are masked to P = 0, not skipped):
//   barrier 3 (consumer 0's): consumer 0's 128 threads bar.sync before turns 1 .. n (n syncs), consumer 1's 128
//     threads bar.arrive after turns 0 .. n - 1 (n arrivals; not after its last turn n: nothing waits for it)
//   barrier 4 (consumer 1's): consumer 1 bar.syncs before turns 0 .. n (n + 1), consumer 0 bar.arrives after turns
//     0 .. n (n + 1)
// Each barrier phase is 128 syncing + 128 arriving threads = 256: the counts balance, so no barrier is left part-way
// when the block exits (none here is persistent) and no arrival is spare. The order is consumer 0's turn 0, consumer
// 1's turn 0, consumer 0's turn 1, ...: consumer 0's turn t + 1 waits for consumer 1's arrival after turn t, which
// follows consumer 1's wait for consumer 0's arrival after turn t. A warpgroup's next arrival on a barrier comes only
// after the other warpgroup has passed that barrier's current phase, so two arrivals never fall in one phase. The
// mbarrier waits for K and V are made before a turn's bar.sync (a turn is not held while TMA loads): the data of turn
// j (K_j, V_{j-1}) needs slot j - STAGES released by both consumers, each within its turn j - STAGES + 1; the other
// consumer's turn j - STAGES + 1 waits only for arrivals after turns up to j - STAGES + 1 < j (STAGES >= 2), which a
// consumer at turn j has made. By induction on j, no wait on data closes a cycle with the turns. The conditions
// around bar.sync / bar.arrive are uniform per warpgroup (consumer, t), as CUTLASS's NamedBarrier uses them.
struct Fa3Turns {
  int consumer, turns;  // turns = n + 1 where n > 0, else 0
  __device__ __forceinline__ void begin(int t) const {
    if (consumer == 1 || t > 0) turn_sync(kTurnBarrier0 + consumer);
  }
  __device__ __forceinline__ void end(int t) const {  // after the turn's wgmma commits, before waiting on them
    if (consumer == 0 || t < turns - 1) turn_arrive(kTurnBarrier0 + 1 - consumer);
  }
};

template <class F>
__device__ __forceinline__ void fa3_consume_pingpong(const Fa3Ring &ring, const Fa3Block &b, const AttentionArgs &args,
                                                     int consumer) {
  Fa3Consumer<F> c(ring, b, args, consumer);
  float correction[2];
  RingCursor at, previous;
  const int n = b.blocks_n;
  const Fa3Turns turns{consumer, n > 0 ? n + 1 : 0};
  wg::mbar_wait(ring.q_full(), 0);
  if (n == 0) {
    c.store(b);
    return;
  }
  if (!F::OVERLAP) {
    for (int t = 0; t <= n; ++t) {
      // the data of this turn: V of block t - 1, K of block t
      if (t > 0) wg::mbar_wait(ring.full_v<F>(previous.slot), previous.phase);
      if (t < n) wg::mbar_wait(ring.full_k(at.slot), at.phase);
      turns.begin(t);
      if (t > 0) {
        wg::wgmma_fence();
        c.issue_pv(previous.slot);
        wg::wgmma_commit();
        if (t == n) turns.end(t);
        wg::wgmma_wait<0>();
        touch_regs(c.o);
        c.release(previous.slot);
      }
      if (t < n) {
#pragma unroll
        for (int i = 0; i < F::S_REGS; ++i) c.s[i] = 0.f;
        touch_regs(c.s);
        wg::wgmma_fence();
        c.issue_s(at.slot);
        wg::wgmma_commit();
        turns.end(t);
        wg::wgmma_wait<0>();
        touch_regs(c.s);
        c.softmax(t * F::BLOCK_N, correction);
        c.rescale(correction);
        c.convert();
        touch_regs(c.o);  // the rescaled O and P are written before the next turn's fence
        touch_regs(c.pa);
        previous = at;
        at.template advance<F::STAGES>();
      }
    }
  } else {
    // turn 0: S_0, softmax, P (O is still 0)
    wg::mbar_wait(ring.full_k(at.slot), at.phase);
    turns.begin(0);
    wg::wgmma_fence();
    c.issue_s(at.slot);
    wg::wgmma_commit();
    turns.end(0);
    wg::wgmma_wait<0>();
    touch_regs(c.s);
    c.softmax(0, correction);
    c.convert();
    previous = at;
    at.template advance<F::STAGES>();
    for (int j = 1; j < n; ++j) {  // turn j: S_j and P·V_{j-1} together, block j's softmax while P·V_{j-1} runs
      touch_regs(c.s);
      touch_regs(c.o);
      touch_regs(c.pa);
      wg::mbar_wait(ring.full_k(at.slot), at.phase);
      wg::mbar_wait(ring.full_v<F>(previous.slot), previous.phase);
      turns.begin(j);
      wg::wgmma_fence();
      c.issue_s(at.slot);
      wg::wgmma_commit();
      c.issue_pv(previous.slot);
      wg::wgmma_commit();
      turns.end(j);
      wg::wgmma_wait<1>();  // S_j has completed
      touch_regs(c.s);
      c.softmax(j * F::BLOCK_N, correction);
      wg::wgmma_wait<0>();  // P·V_{j-1} has completed
      touch_regs(c.o);
      touch_regs(c.pa);
      touch_regs(c.s);
      c.release(previous.slot);
      c.rescale(correction);
      c.convert();
      previous = at;
      at.template advance<F::STAGES>();
    }
    // turn n: the last P·V
    touch_regs(c.o);
    touch_regs(c.pa);
    wg::mbar_wait(ring.full_v<F>(previous.slot), previous.phase);
    turns.begin(n);
    wg::wgmma_fence();
    c.issue_pv(previous.slot);
    wg::wgmma_commit();
    turns.end(n);
    wg::wgmma_wait<0>();
    touch_regs(c.o);
    c.release(previous.slot);
  }
  c.store(b);
}

}  // namespace tracea
