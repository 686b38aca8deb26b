// The index-building stage of a head group in three or four launches, O(T) work per head:
//
// 0. lsh_buckets (optional): Reformer LSH of q and k, argmax over [xR, -xR] with the
//    projection rounded to the inputs' dtype and ties to the earlier direction, as
//    tilesparse.patterns.criteria.lsh computes it;
// 1. bucket_histogram: per (side, b * Hg, chunk of CHUNK tokens) the count of each bin (a
//    kept token's bucket, or the last bin for a dropped token);
// 2. bucket_scatter: a stable counting sort: every chunk finds its bins' offsets from the
//    histograms, ranks its tokens in token order (warp match + a warp-ordered running count)
//    and writes the layout (row order, position, bucket) and the sort keys
//    bucket * T + position (big for a dropped row);
// 3. block_ranges: per block of one side's layout, the bucket segments and each segment's row
//    range (lo, full_lo, full_hi, hi) on the other side, by binary search in its sort keys.
//
// The result equals tilesparse.ir.prepare_group tensor for tensor (tests/gpu/test_cupy_gpu.py;
// on the CPU, tests/backends/cupy/test_index_model.py checks index_model.py, these loops in torch).

#define NT 256
#define CHUNK 1024

// ---------------------------------------------------------------------------------------------
// 0. LSH: one thread per token; the rotation of the head (D x half, float32 holding values of
//    the inputs' dtype) sits in shared memory

template <class DT>
__global__ void __launch_bounds__(NT) lsh_buckets(
    const typename DT::T* __restrict__ q, const typename DT::T* __restrict__ k, const float* __restrict__ rot,
    const int* __restrict__ head_map, int* __restrict__ q_bucket, int* __restrict__ k_bucket,
    long long sqb, long long sqh, long long sqt, long long skb, long long skh, long long skt,
    int seqlen, int heads_g, int kv_group, int head_dim, int half, int negated) {
    extern __shared__ float s_rot[];  // head_dim * half
    const int side = blockIdx.z, bh = blockIdx.y;
    const int b = bh / heads_g, h = head_map[bh % heads_g];
    const float* r = rot + (long long)h * head_dim * half;
    for (int e = threadIdx.x; e < head_dim * half; e += NT) s_rot[e] = r[e];
    __syncthreads();
    const int tok = blockIdx.x * NT + threadIdx.x;
    if (tok >= seqlen) return;
    const typename DT::T* x = side == 0 ? q + b * sqb + h * sqh + tok * sqt
                                        : k + b * skb + (h / kv_group) * skh + tok * skt;
    float top = 0.f, low = 0.f;
    int arg = 0, arg_low = 0;
    for (int c = 0; c < half; ++c) {
        float acc = 0.f;
        for (int d = 0; d < head_dim; ++d) acc += DT::load(x[d]) * s_rot[d * half + c];
        const float p = DT::round(acc);
        if (c == 0 || p > top) { top = p; arg = c; }
        if (c < negated && (c == 0 || p < low)) { low = p; arg_low = c; }
    }
    const int bucket = (negated == 0 || top >= -low) ? arg : half + arg_low;
    (side == 0 ? q_bucket : k_bucket)[(long long)bh * seqlen + tok] = bucket;
}

// ---------------------------------------------------------------------------------------------
// 1. histograms

__device__ __forceinline__ int token_bin(const int* bucket, const unsigned char* keep, long long i, int n_buckets) {
    if (keep != nullptr && keep[i] == 0) return n_buckets;  // the dropped bin, after every bucket
    return bucket != nullptr ? bucket[i] : 0;
}

__global__ void __launch_bounds__(NT) bucket_histogram(
    const int* __restrict__ q_bucket, const int* __restrict__ k_bucket,
    const unsigned char* __restrict__ q_keep, const unsigned char* __restrict__ k_keep,
    int* __restrict__ counts, int seqlen, int n_chunks, int n_buckets, int has_bucket, int has_keep) {
    extern __shared__ int s_bins[];  // n_buckets + 1
    const int side = blockIdx.z, bh = blockIdx.y, chunk = blockIdx.x;
    const int n_bins = n_buckets + 1;
    const int* bucket = has_bucket ? (side == 0 ? q_bucket : k_bucket) : nullptr;
    const unsigned char* keep = has_keep ? (side == 0 ? q_keep : k_keep) : nullptr;
    for (int i = threadIdx.x; i < n_bins; i += NT) s_bins[i] = 0;
    __syncthreads();
    const long long row0 = (long long)bh * seqlen;
    const int t1 = min(seqlen, (chunk + 1) * CHUNK);
    for (int t = chunk * CHUNK + threadIdx.x; t < t1; t += NT) atomicAdd(&s_bins[token_bin(bucket, keep, row0 + t, n_buckets)], 1);
    __syncthreads();
    int* out = counts + (((long long)side * gridDim.y + bh) * n_chunks + chunk) * n_bins;
    for (int i = threadIdx.x; i < n_bins; i += NT) out[i] = s_bins[i];
}

// ---------------------------------------------------------------------------------------------
// 2. stable counting sort

__global__ void __launch_bounds__(NT) bucket_scatter(
    const int* __restrict__ q_bucket, const int* __restrict__ k_bucket,
    const unsigned char* __restrict__ q_keep, const unsigned char* __restrict__ k_keep,
    const int* __restrict__ counts, int* __restrict__ order, int* __restrict__ pos, int* __restrict__ bkt,
    int* __restrict__ skey, int seqlen, int n_chunks, int n_buckets, int has_bucket, int has_keep, int big) {
    extern __shared__ int s_off[];  // n_buckets + 1
    const int side = blockIdx.z, bh = blockIdx.y, chunk = blockIdx.x;
    const int n_bins = n_buckets + 1;
    const int* bucket = has_bucket ? (side == 0 ? q_bucket : k_bucket) : nullptr;
    const unsigned char* keep = has_keep ? (side == 0 ? q_keep : k_keep) : nullptr;
    const int* cnt = counts + ((long long)side * gridDim.y + bh) * n_chunks * n_bins;
    // offset of bin i for this chunk: earlier bins (all chunks) + bin i in earlier chunks
    for (int i = threadIdx.x; i < n_bins; i += NT) {
        int before = 0, total = 0;
        for (int c = 0; c < n_chunks; ++c) {
            int x = cnt[c * n_bins + i];
            total += x;
            if (c < chunk) before += x;
        }
        s_off[i] = total;
        s_off[n_bins + i] = before;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int run = 0;
        for (int i = 0; i < n_bins; ++i) {
            int x = s_off[i];
            s_off[i] = run + s_off[n_bins + i];
            run += x;
        }
    }
    __syncthreads();
    const long long row0 = (long long)bh * seqlen;
    const long long out0 = ((long long)side * gridDim.y + bh) * seqlen;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int sentinel = side == 0 ? -1 : (1 << 30);
    const int dropped = side == 0 ? -1 : -2;
    for (int t0 = chunk * CHUNK; t0 < min(seqlen, (chunk + 1) * CHUNK); t0 += NT) {
        const int t = t0 + threadIdx.x;
        const bool in_t = t < seqlen;
        const int bin = in_t ? token_bin(bucket, keep, row0 + t, n_buckets) : -1;
        const unsigned peers = __match_any_sync(0xffffffffu, bin);
        const int rank = __popc(peers & ((1u << lane) - 1u));
        const bool leader = rank == 0;
        // warps in token order: each reads its bins' running offsets, then its leaders bump them
        for (int w = 0; w < NT / 32; ++w) {
            if (warp == w && in_t) {
                const int row = s_off[bin] + rank;
                const bool kept = bin < n_buckets;
                const int b_ = kept ? bin : 0;
                order[out0 + row] = t;
                pos[out0 + row] = kept ? t : sentinel;
                bkt[out0 + row] = kept ? b_ : dropped;
                skey[out0 + row] = kept ? b_ * seqlen + t : big;
            }
            __syncwarp();
            if (warp == w && in_t && leader) s_off[bin] += __popc(peers);
            __syncthreads();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 3. segments and row ranges of one block of one side

// how many of the other side's sorted keys are < target (<= target with right)
__device__ __forceinline__ int bound(const int* other, int n, int target, bool right) {
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = (lo + hi) >> 1;
        int v = other[mid];
        if (right ? v <= target : v < target) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

__global__ void __launch_bounds__(NT) block_ranges(
    const int* __restrict__ skey, int* __restrict__ q_ranges, int* __restrict__ q_nseg,
    int* __restrict__ k_ranges, int* __restrict__ k_nseg,
    int seqlen, int block_q, int block_k, int q_max_seg, int k_max_seg, int big,
    int causal, int strict, int not_self) {
    __shared__ int s_scan[NT];
    __shared__ int s_valid;
    const int side = blockIdx.z, bh = blockIdx.y, blk = blockIdx.x;
    const int block = side == 0 ? block_q : block_k;
    const int n_blocks = (seqlen + block - 1) / block;
    if (blk >= n_blocks) return;  // uniform over the program
    const int max_seg = side == 0 ? q_max_seg : k_max_seg;
    const int* mine = skey + ((long long)side * gridDim.y + bh) * seqlen;
    const int* other = skey + ((long long)(1 - side) * gridDim.y + bh) * seqlen;
    int* rng = (side == 0 ? q_ranges : k_ranges) + ((long long)bh * n_blocks + blk) * max_seg * 4;
    const int lane = threadIdx.x;
    const int row = blk * block + lane;
    const bool in_block = lane < block;
    const bool in_t = in_block && row < seqlen;
    const int key = in_t ? mine[row] : big;
    const bool valid = key < big;
    const int bucket = valid ? key / seqlen : -1;
    const int p = key % seqlen;
    const int prev_key = (in_t && lane > 0) ? mine[row - 1] : big;
    const int prev_bucket = prev_key < big ? prev_key / seqlen : -1;
    const bool start = valid && bucket != prev_bucket;
    const bool next_in = in_t && lane + 1 < block && row + 1 < seqlen;
    const int next_key = next_in ? mine[row + 1] : big;
    const bool end = valid && (next_key >= big || next_key / seqlen != bucket);
    // inclusive scan of the starts over the block (Hillis-Steele), and the count of valid rows
    if (lane == 0) s_valid = 0;
    s_scan[lane] = start ? 1 : 0;
    __syncthreads();
    if (valid) atomicAdd(&s_valid, 1);
    for (int off = 1; off < NT; off <<= 1) {
        int x = lane >= off ? s_scan[lane - off] : 0;
        __syncthreads();
        s_scan[lane] += x;
        __syncthreads();
    }
    const int nseg = s_scan[NT - 1];
    const int seg = s_scan[lane] - 1;
    const bool uniform = nseg == 1 && s_valid == block;
    if (lane == 0) (side == 0 ? q_nseg : k_nseg)[(long long)bh * n_blocks + blk] = nseg;
    int* slot = rng + seg * 4;
    const int base = bucket * seqlen;
    if (!causal) {
        if (start) {
            const int lo = bound(other, seqlen, base, false);
            const int hi = bound(other, seqlen, base + seqlen, false);
            slot[0] = lo;
            slot[1] = lo;
            slot[2] = uniform ? (not_self ? lo : hi) : lo;
            slot[3] = hi;
        }
    } else if (side == 0) {
        // keys of the segment's bucket at or before its latest query (before, if strict);
        // unmasked: keys at or before its earliest query (p is the min on the start row)
        if (start) {
            const int lo = bound(other, seqlen, base, false);
            const int fhi = bound(other, seqlen, base + p, !strict);
            slot[0] = lo;
            slot[1] = lo;
            slot[2] = uniform ? max(fhi, lo) : lo;
        }
        if (end) slot[3] = bound(other, seqlen, base + p, !strict);  // p is the max on the end row
    } else {
        // queries of the segment's bucket at or after its earliest key (after, if strict);
        // unmasked: queries at or after its latest key
        if (start) {
            const int lo = bound(other, seqlen, base + p, strict != 0);
            const int hi = bound(other, seqlen, base + seqlen, false);
            slot[0] = lo;
            if (!uniform) slot[1] = lo;
            slot[2] = uniform ? hi : lo;
            slot[3] = hi;
        }
        if (end && uniform) slot[1] = bound(other, seqlen, base + p, strict != 0);
    }
    // unused segment slots are zero
    for (int s = nseg + lane; s < max_seg; s += NT) {
        rng[s * 4] = 0;
        rng[s * 4 + 1] = 0;
        rng[s * 4 + 2] = 0;
        rng[s * 4 + 3] = 0;
    }
}
