// The index-building stage of a head group in two launches, O(T) work per head:
//
// 1. index_count: per (side, b * Hg, chunk of CHUNK tokens), the chunk's histogram of bins (a
//    kept token's bucket, or the last bin for a dropped token). With rotations it first hashes
//    the chunk's tokens: Reformer LSH, argmax over [xR, -xR] with the projection rounded to the
//    inputs' dtype and ties to the earlier direction, as tilesparse.patterns.criteria.lsh
//    computes it (tiles of tokens staged in shared memory, COLS threads per token), and writes
//    the buckets.
// 2. index_scatter: a stable counting sort and the block ranges. Every chunk finds its bins'
//    offsets from the histograms, ranks its tokens in token order (warp match + a
//    warp-ordered running count) and writes the layout (row order, position, bucket). The
//    owner of a row that starts or ends a segment (a run of one bucket inside a block of the
//    sorted rows) writes that segment's row range on the other side: from the other side's
//    bin offsets alone, or, where causality cuts a bucket, plus the other side's count of the
//    bucket's tokens before a position (its histograms of earlier chunks and a warp's count
//    over the rest). The owner of a block's first row writes the block's segment count and
//    zeroes its unused slots. No launch waits for another side's sort.
//
// The result equals tilesparse.ir.prepare_group tensor for tensor (tests/gpu/test_cupy_gpu.py;
// on the CPU, tests/backends/cupy/test_emulated_kernels.py runs these kernels in an emulator
// and tests/backends/cupy/test_index_model.py checks index_model.py, the same loops in torch).

#define NT 256
#define CHUNK 1024
#define KEY_SENTINEL (1 << 30)  // tilesparse.ir.semantics.KEY_SENTINEL: k_pos of a dropped key
#define COLS 8         // threads per token in the LSH
#define TT (NT / COLS)  // tokens per tile of the LSH
static_assert(CHUNK % NT == 0, "a program's passes of NT tokens must tile its chunk");

__device__ __forceinline__ int token_bin(const int* bucket, const unsigned char* keep, long long i, int n_buckets) {
    if (keep != nullptr && keep[i] == 0) return n_buckets;  // the dropped bin, after every bucket
    return bucket != nullptr ? bucket[i] : 0;
}

// ---------------------------------------------------------------------------------------------
// 1. (LSH and) histograms

// LSH of a tile of TT tokens staged in shared memory (rows read coalesced, as float): a token's
// COLS threads each project onto every COLS-th column of the rotation [d][cols] and keep their
// best (top and, over the negated directions, lowest) projection; the group's shuffles then
// pick the argmax over [xR, -xR], ties to the earlier direction
template <class DT>
__device__ __forceinline__ int lsh_bucket(const float* xs, const float* s_rot, int head_dim, int cols, int half,
                                          int negated) {
    const int j = threadIdx.x % COLS;
    float top = NEG_INF, low = POS_INF;
    int arg = half, arg_low = half;  // no column (j >= half): loses every tie, even at -inf
    for (int c = j; c < half; c += COLS) {
        float acc = 0.f;
        for (int d = 0; d < head_dim; ++d) acc += xs[d] * s_rot[d * cols + c];
        const float p = DT::round(acc);
        if (c == j || p > top) { top = p; arg = c; }  // c grows: the earlier column keeps a tie
        if (c < negated && (c == j || p < low)) { low = p; arg_low = c; }
    }
#pragma unroll
    for (int m = 1; m < COLS; m <<= 1) {
        const float t2 = __shfl_xor_sync(0xffffffffu, top, m), l2 = __shfl_xor_sync(0xffffffffu, low, m);
        const int a2 = __shfl_xor_sync(0xffffffffu, arg, m), b2 = __shfl_xor_sync(0xffffffffu, arg_low, m);
        if (t2 > top || (t2 == top && a2 < arg)) { top = t2; arg = a2; }
        if (l2 < low || (l2 == low && b2 < arg_low)) { low = l2; arg_low = b2; }
    }
    return (negated == 0 || top >= -low) ? arg : half + arg_low;
}

template <class DT>
__global__ void __launch_bounds__(NT) index_count(
    const typename DT::T* __restrict__ q, const typename DT::T* __restrict__ k, const float* __restrict__ rot,
    const int* __restrict__ head_map, int* __restrict__ q_bucket, int* __restrict__ k_bucket,
    const unsigned char* __restrict__ q_keep, const unsigned char* __restrict__ k_keep, int* __restrict__ counts,
    long long sqb, long long sqh, long long sqt, long long skb, long long skh, long long skt,
    int seqlen, int heads_g, int kv_group, int head_dim, int half, int negated,
    int n_chunks, int n_buckets, int hash, int has_bucket, int has_keep) {
    // n_bins counts; with hash, the rotation (head_dim x COLS-padded columns) and a tile of TT
    // tokens (head_dim + 1 floats each)
    extern __shared__ int s_mem[];
    const int side = blockIdx.z, bh = blockIdx.y, chunk = blockIdx.x;
    const int n_bins = n_buckets + 1;
    int* s_bins = s_mem;
    float* s_rot = (float*)(s_mem + ((n_bins + 3) & ~3));
    int* bucket = has_bucket ? (side == 0 ? q_bucket : k_bucket) : nullptr;
    const unsigned char* keep = has_keep ? (side == 0 ? q_keep : k_keep) : nullptr;
    const long long row0 = (long long)bh * seqlen;
    const int t0 = chunk * CHUNK, t1 = min(seqlen, (chunk + 1) * CHUNK);
    for (int i = threadIdx.x; i < n_bins; i += NT) s_bins[i] = 0;
    if (hash) {
        const int b = bh / heads_g, h = head_map[bh % heads_g];
        const float* r = rot + (long long)h * head_dim * half;  // (D, half) of this head
        const int cols = (half + COLS - 1) / COLS * COLS;
        const int ld = head_dim + 1;  // the tile's row stride: tokens in other banks
        float* s_x = s_rot + head_dim * cols;
        for (int e = threadIdx.x; e < head_dim * cols; e += NT) {
            const int d = e / cols, c = e % cols;
            s_rot[e] = c < half ? DT::round(r[d * half + c]) : 0.f;  // the draw in the inputs' dtype
        }
        const typename DT::T* x0 = side == 0 ? q + b * sqb + h * sqh : k + b * skb + (h / kv_group) * skh;
        const long long st = side == 0 ? sqt : skt;
        for (int u0 = t0; u0 < t1; u0 += TT) {
            __syncthreads();  // the rotation is in; the previous tile is used up
            const int n = min(TT, t1 - u0);
            for (int e = threadIdx.x; e < n * head_dim; e += NT) {
                const int u = e / head_dim, d = e % head_dim;
                s_x[u * ld + d] = DT::load(x0[(u0 + u) * st + d]);
            }
            __syncthreads();
            const int u = threadIdx.x / COLS;  // NT / COLS = TT tokens, COLS threads each
            const int bk = lsh_bucket<DT>(s_x + u * ld, s_rot, head_dim, cols, half, negated);
            if (u < n && threadIdx.x % COLS == 0) {
                bucket[row0 + u0 + u] = bk;
                atomicAdd(&s_bins[(keep != nullptr && keep[row0 + u0 + u] == 0) ? n_buckets : bk], 1);
            }
        }
    } else {
        __syncthreads();
        for (int t = t0 + threadIdx.x; t < t1; t += NT) atomicAdd(&s_bins[token_bin(bucket, keep, row0 + t, n_buckets)], 1);
    }
    __syncthreads();
    int* out = counts + (((long long)side * gridDim.y + bh) * n_chunks + chunk) * n_bins;
    for (int i = threadIdx.x; i < n_bins; i += NT) out[i] = s_bins[i];
}

// ---------------------------------------------------------------------------------------------
// 2. stable counting sort and block ranges

// what a causal bound fills in once the count is known (see index_scatter)
#define Q_START_U 0  // a query segment's start row, block uniform: slot[2]
#define Q_END 1      // a query segment's end row: slot[3]
#define K_START 2    // a key segment's start row: slot[0], slot[1], slot[2]
#define K_START_U 3  // the same, block uniform: slot[0]
#define K_END_U 4    // a key segment's end row, block uniform: slot[1]

struct Bound {
    int* slot;  // the segment's four ints
    int bin;    // the other side's bin (the segment's bucket)
    int upto;   // count the other side's tokens of the bin at positions < upto
    int what;   // Q_START_U .. K_END_U
};

// the bin holding sorted row `row` (start[i] <= row < start[i + 1]; empty bins never hold one)
__device__ __forceinline__ int bin_of(const int* start, int n_bins, int row) {
    int lo = 0, hi = n_bins;  // the last i with start[i] <= row
    while (hi - lo > 1) {
        const int mid = (lo + hi) >> 1;
        if (start[mid] <= row) lo = mid;
        else hi = mid;
    }
    return lo;
}

__global__ void __launch_bounds__(NT) index_scatter(
    const int* __restrict__ q_bucket, const int* __restrict__ k_bucket,
    const unsigned char* __restrict__ q_keep, const unsigned char* __restrict__ k_keep,
    const int* __restrict__ counts, int* __restrict__ order, int* __restrict__ pos, int* __restrict__ bkt,
    int* __restrict__ q_ranges, int* __restrict__ q_nseg, int* __restrict__ k_ranges, int* __restrict__ k_nseg,
    int seqlen, int n_chunks, int n_buckets, int has_bucket, int has_keep,
    int block_q, int block_k, int q_max_seg, int k_max_seg, int causal, int strict, int not_self) {
    // my bins' start rows (n_bins + 1), my chunk's running offsets (n_bins), the other side's
    // start rows (n_bins + 1), my count of non-empty kept bins before each bin (n_bins + 1)
    extern __shared__ int s_mem[];
    __shared__ Bound s_queue[2 * NT];
    __shared__ int s_queued;
    const int side = blockIdx.z, bh = blockIdx.y, chunk = blockIdx.x;
    const int n_bins = n_buckets + 1;
    int* s_start = s_mem;
    int* s_run = s_start + n_bins + 1;
    int* s_other = s_run + n_bins;
    int* s_nonempty = s_other + n_bins + 1;
    const int* bucket = has_bucket ? (side == 0 ? q_bucket : k_bucket) : nullptr;
    const unsigned char* keep = has_keep ? (side == 0 ? q_keep : k_keep) : nullptr;
    const int* o_bucket = has_bucket ? (side == 0 ? k_bucket : q_bucket) : nullptr;
    const unsigned char* o_keep = has_keep ? (side == 0 ? k_keep : q_keep) : nullptr;
    const int* cnt = counts + ((long long)side * gridDim.y + bh) * n_chunks * n_bins;
    const int* o_cnt = counts + ((long long)(1 - side) * gridDim.y + bh) * n_chunks * n_bins;
    // per bin: my total, my count in earlier chunks, the other side's total
    for (int i = threadIdx.x; i < n_bins; i += NT) {
        int before = 0, total = 0, other = 0;
        for (int c = 0; c < n_chunks; ++c) {
            const int x = cnt[c * n_bins + i];
            total += x;
            if (c < chunk) before += x;
            other += o_cnt[c * n_bins + i];
        }
        s_start[i + 1] = total;
        s_run[i] = before;
        s_other[i + 1] = other;
    }
    if (threadIdx.x == 0) s_queued = 0;
    __syncthreads();
    if (threadIdx.x == 0) {  // exclusive scans over the bins
        int run = 0, o_run = 0, nonempty = 0;
        for (int i = 0; i < n_bins; ++i) {
            const int x = s_start[i + 1], y = s_other[i + 1];
            s_start[i] = run;
            s_other[i] = o_run;
            s_nonempty[i] = nonempty;
            s_run[i] += run;
            run += x;
            o_run += y;
            nonempty += (x > 0 && i < n_buckets) ? 1 : 0;
        }
        s_start[n_bins] = run;
        s_other[n_bins] = o_run;
        s_nonempty[n_bins] = nonempty;
    }
    __syncthreads();
    const long long row0 = (long long)bh * seqlen;
    const long long out0 = ((long long)side * gridDim.y + bh) * seqlen;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int sentinel = side == 0 ? -1 : KEY_SENTINEL;
    const int dropped = side == 0 ? -1 : -2;
    const int block = side == 0 ? block_q : block_k;
    const int max_seg = side == 0 ? q_max_seg : k_max_seg;
    const int n_blocks = (seqlen + block - 1) / block;
    int* ranges = (side == 0 ? q_ranges : k_ranges) + (long long)bh * n_blocks * max_seg * 4;
    int* nsegs = (side == 0 ? q_nseg : k_nseg) + (long long)bh * n_blocks;
    const int kept = s_start[n_buckets];  // rows past it are dropped
    for (int t0 = chunk * CHUNK; t0 < min(seqlen, (chunk + 1) * CHUNK); t0 += NT) {
        const int t = t0 + threadIdx.x;
        const bool in_t = t < seqlen;
        const int bin = in_t ? token_bin(bucket, keep, row0 + t, n_buckets) : -1;
        const unsigned peers = __match_any_sync(0xffffffffu, bin);
        const int rank = __popc(peers & ((1u << lane) - 1u));
        const bool leader = rank == 0;
        int row = -1;
        // warps in token order: each reads its bins' running offsets, then its leaders bump them
        for (int w = 0; w < NT / 32; ++w) {
            if (warp == w && in_t) row = s_run[bin] + rank;
            __syncwarp();
            if (warp == w && in_t && leader) s_run[bin] += __popc(peers);
            __syncthreads();
        }
        if (in_t) {
            const bool is_kept = bin < n_buckets;
            order[out0 + row] = t;
            pos[out0 + row] = is_kept ? t : sentinel;
            bkt[out0 + row] = is_kept ? bin : dropped;
            const int blk = row / block, first = blk * block;
            const int last = min(first + block, kept) - 1;  // the block's last kept row
            const int b0 = first < kept ? bin_of(s_start, n_bins, first) : 0;
            const int nseg = first < kept ? s_nonempty[bin_of(s_start, n_bins, last)] - s_nonempty[b0] + 1 : 0;
            const bool uniform = nseg == 1 && last - first + 1 == block;
            int* rng = ranges + (long long)blk * max_seg * 4;
            if (row == first) {  // the block's segment count, its unused slots zero
                nsegs[blk] = nseg;
                for (int s = nseg; s < max_seg; ++s) rng[4 * s] = rng[4 * s + 1] = rng[4 * s + 2] = rng[4 * s + 3] = 0;
            }
            const bool start = is_kept && (row == first || row == s_start[bin]);
            const bool end = is_kept && (row == first + block - 1 || row == s_start[bin + 1] - 1);
            int* slot = rng + 4 * (is_kept ? s_nonempty[bin] - s_nonempty[b0] : 0);
            const int lo = is_kept ? s_other[bin] : 0, hi = is_kept ? s_other[bin + 1] : 0;
            if (!causal) {
                if (start) {
                    slot[0] = lo;
                    slot[1] = lo;
                    slot[2] = uniform ? (not_self ? lo : hi) : lo;
                    slot[3] = hi;
                }
            } else if (side == 0) {
                // keys of the bucket at or before the segment's latest query (before, if strict);
                // unmasked: keys at or before its earliest query
                const int upto = strict ? t : t + 1;
                if (start) {
                    slot[0] = lo;
                    slot[1] = lo;
                    if (uniform) s_queue[atomicAdd(&s_queued, 1)] = Bound{slot, bin, upto, Q_START_U};
                    else slot[2] = lo;
                }
                if (end) s_queue[atomicAdd(&s_queued, 1)] = Bound{slot, bin, upto, Q_END};
            } else {
                // queries of the bucket at or after the segment's earliest key (after, if
                // strict); unmasked: queries at or after its latest key
                const int upto = strict ? t + 1 : t;
                if (start) {
                    slot[3] = hi;
                    if (uniform) slot[2] = hi;
                    s_queue[atomicAdd(&s_queued, 1)] = Bound{slot, bin, upto, uniform ? K_START_U : K_START};
                }
                if (end && uniform) s_queue[atomicAdd(&s_queued, 1)] = Bound{slot, bin, upto, K_END_U};
            }
        }
        __syncthreads();
        // the queued causal bounds, a warp each: the other side's tokens of the bin before
        // `upto` = its earlier chunks' histograms + a count over the rest of upto's chunk
        for (int e = warp; e < s_queued; e += NT / 32) {
            const Bound bd = s_queue[e];
            const int full = bd.upto / CHUNK;
            int n = 0;
            for (int c = lane; c < full; c += 32) n += o_cnt[c * n_bins + bd.bin];
            for (int u = full * CHUNK + lane; u < bd.upto; u += 32)
                n += token_bin(o_bucket, o_keep, row0 + u, n_buckets) == bd.bin ? 1 : 0;
#pragma unroll
            for (int m = 16; m > 0; m >>= 1) n += __shfl_xor_sync(0xffffffffu, n, m);
            if (lane == 0) {
                const int v = s_other[bd.bin] + n;
                if (bd.what == Q_START_U) bd.slot[2] = v;
                else if (bd.what == Q_END) bd.slot[3] = v;
                else if (bd.what == K_END_U) bd.slot[1] = v;
                else if (bd.what == K_START_U) bd.slot[0] = v;
                else bd.slot[0] = bd.slot[1] = bd.slot[2] = v;
            }
        }
        __syncthreads();
        if (threadIdx.x == 0) s_queued = 0;
        __syncthreads();
    }
}
