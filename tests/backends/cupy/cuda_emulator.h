// A tiny CUDA runtime for running the backend's .cu kernels on the CPU, for tests only.
//
// Every thread of a block is a fiber (ucontext); the blocks of a grid run one after another.
// __syncthreads and __syncwarp are real barriers (a fiber waits until every thread of its block,
// or of its warp, arrives), __shfl_xor_sync and __match_any_sync exchange values through a warp
// barrier, atomics are plain read-modify-writes (fibers never preempt each other). A barrier
// that cannot complete (a thread exited or waits elsewhere) aborts with a message. Before every
// block the dynamic shared memory is filled with 0xff bytes (NaN floats, -1 integers), so a read
// of shared memory no thread wrote shows; the bytes past the launch's size are a canary the
// launcher checks, so a write past it shows too. The element
// types replace common.cuh's (which uses PTX).
#pragma once
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include <cstdint>
#include <functional>
#include <type_traits>
#include <utility>
#include <algorithm>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __launch_bounds__(x)

struct dim3 {
    unsigned x = 0, y = 0, z = 0;
};

namespace emu {

struct Fiber {
    ucontext_t ctx;
    char* stack = nullptr;
    unsigned tid = 0;
    bool done = false;
};

struct Block {
    std::vector<Fiber> fibers;
    ucontext_t main;
    Fiber* cur = nullptr;
    unsigned nt = 0;
    unsigned long gen = 0;
    unsigned count = 0;
    std::vector<unsigned long> warp_gen;
    std::vector<unsigned> warp_count;
    std::vector<uint64_t> exchange;
    bool progress = false;
};

inline Block* blk = nullptr;
inline void (*on_block)() = nullptr;  // runs before every block: poisons the dynamic shared memory
inline dim3 block_idx, grid_dim, block_dim;
inline std::function<void()>* body = nullptr;

inline void yield() { swapcontext(&blk->cur->ctx, &blk->main); }

inline void barrier_all() {
    unsigned long g = blk->gen;
    if (++blk->count == blk->nt) {
        blk->count = 0;
        ++blk->gen;
        blk->progress = true;
        return;
    }
    while (blk->gen == g) yield();
    blk->progress = true;
}

inline void barrier_warp() {
    unsigned w = blk->cur->tid / 32;
    unsigned lanes = blk->nt - w * 32 < 32 ? blk->nt - w * 32 : 32;
    unsigned long g = blk->warp_gen[w];
    if (++blk->warp_count[w] == lanes) {
        blk->warp_count[w] = 0;
        ++blk->warp_gen[w];
        blk->progress = true;
        return;
    }
    while (blk->warp_gen[w] == g) yield();
    blk->progress = true;
}

inline void trampoline() {
    (*body)();
    blk->cur->done = true;
    blk->progress = true;
}

constexpr size_t STACK = 128 * 1024;

// fiber stacks, allocated once (not zeroed) and reused by every block
inline char* stack_of(unsigned t) {
    static std::vector<char*> pool;
    while (pool.size() <= t) pool.push_back(static_cast<char*>(malloc(STACK)));
    return pool[t];
}

inline void run_block(std::function<void()>& fn, unsigned nt) {
    Block b;
    b.nt = nt;
    b.fibers.resize(nt);
    b.warp_gen.assign((nt + 31) / 32, 0);
    b.warp_count.assign((nt + 31) / 32, 0);
    b.exchange.assign(nt, 0);
    blk = &b;
    body = &fn;
    if (on_block) on_block();
    for (unsigned t = 0; t < nt; ++t) {
        Fiber& f = b.fibers[t];
        f.tid = t;
        f.stack = stack_of(t);
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = f.stack;
        f.ctx.uc_stack.ss_size = STACK;
        f.ctx.uc_link = &b.main;
        makecontext(&f.ctx, trampoline, 0);
    }
    // fibers run until they wait, in a shuffled order every pass: a thread that reads what
    // another writes without a barrier between sees poison or stale data in some order
    static uint64_t rng = 0x9e3779b97f4a7c15ull;
    std::vector<unsigned> order(nt);
    for (unsigned t = 0; t < nt; ++t) order[t] = t;
    for (;;) {
        bool any = false;
        b.progress = false;
        for (unsigned t = nt - 1; t > 0; --t) {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            std::swap(order[t], order[rng % (t + 1)]);
        }
        for (unsigned t : order) {
            Fiber& f = b.fibers[t];
            if (f.done) continue;
            any = true;
            b.cur = &f;
            swapcontext(&b.main, &f.ctx);
        }
        if (!any) break;
        if (!b.progress) {
            fprintf(stderr, "cuda_emulator: deadlock in block (%u, %u, %u): a barrier cannot complete\n", block_idx.x,
                    block_idx.y, block_idx.z);
            abort();
        }
    }
    blk = nullptr;
}

template <class... A, size_t... I>
void invoke(void (*k)(A...), void** args, std::index_sequence<I...>) {
    k(*static_cast<std::decay_t<A>*>(args[I])...);
}

template <class... A>
int run(void (*k)(A...), void** args, int gx, int gy, int gz, int nt) {
    std::function<void()> fn = [&] { invoke(k, args, std::index_sequence_for<A...>{}); };
    grid_dim = dim3{(unsigned)gx, (unsigned)gy, (unsigned)gz};
    block_dim = dim3{(unsigned)nt, 1, 1};
    for (int z = 0; z < gz; ++z)
        for (int y = 0; y < gy; ++y)
            for (int x = 0; x < gx; ++x) {
                block_idx = dim3{(unsigned)x, (unsigned)y, (unsigned)z};
                run_block(fn, nt);
            }
    return 0;
}

inline dim3 thread_idx() { return dim3{blk->cur->tid, 0, 0}; }

}  // namespace emu

#define threadIdx (emu::thread_idx())
#define blockIdx (emu::block_idx)
#define gridDim (emu::grid_dim)
#define blockDim (emu::block_dim)

inline void __syncthreads() { emu::barrier_all(); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu::barrier_warp(); }

template <class T>
T __shfl_xor_sync(unsigned, T v, int lane_mask) {
    static_assert(sizeof(T) <= 8, "");
    unsigned t = emu::blk->cur->tid;
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof(T));
    emu::blk->exchange[t] = bits;
    emu::barrier_warp();
    unsigned partner = (t & ~31u) | ((t & 31u) ^ (unsigned)lane_mask);
    T r;
    memcpy(&r, &emu::blk->exchange[partner], sizeof(T));
    emu::barrier_warp();
    return r;
}

inline unsigned __match_any_sync(unsigned, int v) {
    unsigned t = emu::blk->cur->tid;
    emu::blk->exchange[t] = (uint64_t)(int64_t)v;
    emu::barrier_warp();
    unsigned mask = 0, w0 = t & ~31u;
    for (unsigned l = 0; l < 32 && w0 + l < emu::blk->nt; ++l)
        if ((int)(int64_t)emu::blk->exchange[w0 + l] == v) mask |= 1u << l;
    emu::barrier_warp();
    return mask;
}

inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __ffs(unsigned x) { return __builtin_ffs((int)x); }
template <class T>
T atomicAdd(T* p, T v) {
    T old = *p;
    *p = old + v;
    return old;
}
inline float __uint_as_float(unsigned x) {
    float f;
    memcpy(&f, &x, 4);
    return f;
}
inline float __int_as_float(int x) { return __uint_as_float((unsigned)x); }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }

#define POS_INF __uint_as_float(0x7f800000u)
#define NEG_INF __uint_as_float(0xff800000u)
#define QNAN __uint_as_float(0x7fc00000u)
inline bool is_finite(float x) { return fabsf(x) < POS_INF; }

struct F32 {
    typedef float T;
    static inline float load(float x) { return x; }
    static inline float round(float x) { return x; }
};
struct F16 {
    typedef unsigned short T;
    static inline float load(unsigned short h) {  // IEEE half -> float, subnormals and inf/nan too
        unsigned sign = (h >> 15) & 1u, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
        float mag;
        if (exp == 0) mag = ldexpf((float)man, -24);
        else if (exp == 31) mag = man ? __uint_as_float(0x7fc00000u) : POS_INF;
        else mag = ldexpf((float)(man | 0x400u), (int)exp - 25);
        return sign ? -mag : mag;
    }
    static inline float round(float x) {  // to the nearest half (ties to even), normal range
        int e;
        frexpf(x, &e);
        float ulp = ldexpf(1.f, (e - 11 < -24 ? -24 : e - 11));
        return nearbyintf(x / ulp) * ulp;
    }
};
struct BF16 {
    typedef unsigned short T;
    static inline float load(unsigned short x) { return __uint_as_float(((unsigned int)x) << 16); }
    static inline float round(float x) {
        unsigned u;
        memcpy(&u, &x, 4);
        u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even (finite values)
        return load((unsigned short)(u >> 16));
    }
};
