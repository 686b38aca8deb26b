// Feature-intersection attention (FlashSFA-style) over a prepared tilesparse head group.
//
// Queries are CSR-like: every (b, head, token) keeps K feature ids (int16) and values. Keys are
// stored compressed per key tile of BN layout rows, feature-major (CSC): for each feature f,
// the tile's keys that keep f, as (key row within the tile: int16, value), with int16 column
// pointers (a tile holds at most BN * K <= 16,384 entries). A score s(i, j) = sum over f in
// supp(q_i) & supp(k_j) of q_if k_jf is built by walking, for each feature of query i, the
// column of that feature in the key tile: the work is the size of the support overlaps, and
// no n x n matrix exists outside a BM x BN tile in shared memory. V stays dense.
//
// Every program handles one block of rows of one (batch, query head of the group): grid
// (blocks, B * Hg), NT threads. Rows are read through the layout's row orders and written at
// original positions; the tiles visited are the IR's per-segment row ranges
// (lo, full_lo, full_hi, hi) converted to tiles, the ones proven full run without the mask.
// The softmax is SCFA's NaN-safe online softmax in log2 units: a row with no kept key ends
// with l = 0, outputs zeros and stores lse = +inf, so its gradients are zero.
//
// Non-finite values: a product of a probability that is exactly 0 (a masked element) and an inf
// or NaN is NaN, so every value a tile multiplies by such probabilities is read finite (a
// non-finite one as 0) and the rows that keep it are made NaN instead: through the key's marks
// in the forward pass (a NaN score), through a non-finite lse or delta in the backward pass.
// A row's output and gradients then depend only on the keys its mask keeps. This happens in
// the tile loads, not in the inner products.
//
// Thread map (NT = 256, BM = BN = 64): row i = tid / 4 of the tile, lane l4 = tid % 4; the four
// lanes of a row sit in one warp. A lane owns the scores of columns j = l4 (mod 4) and the
// output dims d = l4 (mod 4), so every shared score is written by one thread only.

#define BM 64
#define BN 64
#define NT 256
#define KEY_SENTINEL (1 << 30)

// predicate flags (tilesparse.backends.cupy.layout.predicate_bits)
#define P_CAUSAL 1
#define P_STRICT 2
#define P_SAME_BUCKET 4
#define P_NOT_SELF 8

__device__ __forceinline__ bool keep_element(int qp, int qb, int kp, int kb, int flags) {
    bool keep;
    if (flags & P_CAUSAL) {
        // sentinels fail on their own: a dropped query sits at -1, a dropped key at 2^30
        keep = (flags & P_STRICT) ? (kp < qp) : (kp <= qp);
    } else {
        keep = (qp >= 0) && (kp != KEY_SENTINEL);
    }
    if (flags & P_SAME_BUCKET) keep = keep && (qb == kb);
    if (flags & P_NOT_SELF) keep = keep && (kp != qp);
    return keep;
}

// Segment s of a block's row ranges as tiles `width` rows wide: visit [lo, hi), of which
// [f0, f1) need no mask; tiles an earlier segment visited are skipped (prev_hi is the running
// maximum of the earlier segments' hi, updated here). Same arithmetic as ir.tile_intervals.
__device__ __forceinline__ void segment_tiles(const int* rng, int s, int width, int& prev_hi,
                                              int& lo, int& f0, int& f1, int& hi) {
    int lo_r = rng[s * 4], flo_r = rng[s * 4 + 1], fhi_r = rng[s * 4 + 2], hi_r = rng[s * 4 + 3];
    lo = max(lo_r / width, prev_hi);
    hi = max((hi_r + width - 1) / width, lo);
    f0 = min(max((flo_r + width - 1) / width, lo), hi);
    f1 = min(max(fhi_r / width, f0), hi);
    prev_hi = max(prev_hi, hi);
}

// ---------------------------------------------------------------------------------------------
// compressed keys: one program per (key tile, b * Hg) builds the tile's CSC

template <class DT>
__global__ void __launch_bounds__(NT) sfa_compress_keys(
    const int* __restrict__ k_order, const short* __restrict__ k_ids, const typename DT::T* __restrict__ k_vals,
    short* __restrict__ kc_ptr, short* __restrict__ kc_row, typename DT::T* __restrict__ kc_val,
    int seqlen, int n_tiles, int n_feat, int topk) {
    extern __shared__ int smem_c[];
    int* s_cnt = smem_c;                            // n_feat + 1
    short* s_ids = (short*)(s_cnt + n_feat + 1);    // BN * topk
    const int tid = threadIdx.x, n = blockIdx.x, bh = blockIdx.y;
    const long long row0 = (long long)bh * seqlen;
    const int c0 = n * BN;
    const int rows = min(BN, seqlen - c0);
    const int nnz = rows * topk;
    for (int e = tid; e < nnz; e += NT) {
        int j = k_order[row0 + c0 + e / topk];
        s_ids[e] = k_ids[(row0 + j) * topk + e % topk];
    }
    __syncthreads();
    // one thread per feature: count, then place in key order (deterministic, no atomics)
    for (int f = tid; f < n_feat; f += NT) {
        int cnt = 0;
        for (int e = 0; e < nnz; ++e) cnt += (s_ids[e] == f);
        s_cnt[f] = cnt;
    }
    __syncthreads();
    if (tid == 0) {
        int run = 0;
        for (int f = 0; f < n_feat; ++f) {
            int c = s_cnt[f];
            s_cnt[f] = run;
            run += c;
        }
        s_cnt[n_feat] = run;
    }
    __syncthreads();
    const long long tile = (long long)bh * n_tiles + n;
    short* ptr = kc_ptr + tile * (n_feat + 1);
    short* out_row = kc_row + tile * (BN * topk);
    typename DT::T* out_val = kc_val + tile * (BN * topk);
    for (int f = tid; f <= n_feat; f += NT) ptr[f] = (short)s_cnt[f];
    for (int f = tid; f < n_feat; f += NT) {
        int pos = s_cnt[f];
        for (int e = 0; e < nnz; ++e) {
            if (s_ids[e] == f) {
                int c = e / topk;
                int j = k_order[row0 + c0 + c];
                out_row[pos] = (short)c;
                out_val[pos] = k_vals[(row0 + j) * topk + e % topk];
                ++pos;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// shared pieces of the attention kernels

// where one (b, head)'s keys live in global memory
template <class DT>
struct Keys {
    const int* order;
    const int* pos;
    const int* bucket;
    const short* ptr;
    const short* row;
    const typename DT::T* val;
    const typename DT::T* v;  // this head's V: row j at v + j * stride_vt
    long long stride_vt;
    long long row0;           // (b * Hg + head) * seqlen
    long long bh;
    int seqlen, n_tiles, n_feat, topk;
};

// The keys of program bh = blockIdx.y, one (b, query head of the group): the head's V is its kv
// head's, head_map[head] / kv_group.
template <class DT>
__device__ __forceinline__ Keys<DT> program_keys(const int* k_order, const int* k_pos, const int* k_bucket,
                                                 const short* kc_ptr, const short* kc_row,
                                                 const typename DT::T* kc_val, const typename DT::T* v,
                                                 long long stride_vb, long long stride_vh, long long stride_vt,
                                                 const int* head_map, int heads_g, int kv_group, int seqlen,
                                                 int n_tiles, int n_feat, int topk) {
    const int bh = blockIdx.y;
    const int b = bh / heads_g, hkv = head_map[bh % heads_g] / kv_group;
    return {k_order, k_pos, k_bucket, kc_ptr, kc_row, kc_val, v + b * stride_vb + hkv * stride_vh,
            stride_vt, (long long)bh * seqlen, bh, seqlen, n_tiles, n_feat, topk};
}

// Layout row r of the queries: in range, its original row, position and bucket (sentinels past T).
struct QueryRow {
    bool ok;
    int orig, pos, bkt;
};
__device__ __forceinline__ QueryRow query_row(const int* q_order, const int* q_pos, const int* q_bucket, long long row0,
                                              int r, int seqlen) {
    const bool ok = r < seqlen;
    return {ok, ok ? q_order[row0 + r] : 0, ok ? q_pos[row0 + r] : -1, ok ? q_bucket[row0 + r] : -1};
}

// One segment's tiles (segment_tiles): visit [lo, hi), of which [f0, f1) need no mask.
struct TileInterval {
    int lo, f0, f1, hi;
    __device__ __forceinline__ bool masked(int n) const { return n < f0 || n >= f1; }
};

// The segments of block `block` of program bh as tile intervals `width` rows wide, in order, for
// `for (const TileInterval iv : BlockTiles(...))`: reading a segment updates the running prev_hi,
// so each is read once and in order, as a range-based for loop does.
struct BlockTiles {
    const int* rng;
    int n_seg, width;
    __device__ __forceinline__ BlockTiles(const int* ranges, const int* nseg, int bh, int n_blocks, int block,
                                          int max_seg, int tile_rows)
        : rng(ranges + ((long long)bh * n_blocks + block) * max_seg * 4),
          n_seg(nseg[(long long)bh * n_blocks + block]),
          width(tile_rows) {}
    struct Segment {
        const int* rng;
        int s, width, prev_hi;
        __device__ __forceinline__ bool operator!=(int end) const { return s < end; }
        __device__ __forceinline__ void operator++() { ++s; }
        __device__ __forceinline__ TileInterval operator*() {
            TileInterval iv;
            segment_tiles(rng, s, width, prev_hi, iv.lo, iv.f0, iv.f1, iv.hi);
            return iv;
        }
    };
    __device__ __forceinline__ Segment begin() const { return {rng, 0, width, 0}; }
    __device__ __forceinline__ int end() const { return n_seg; }
};

// a key tile in shared memory
struct KeyTile {
    float* v;      // BN x (HEAD_DIM + 1), dense V rows of the tile (zeros past T)
    float* val;    // BN * topk CSC values
    int* ptr;      // n_feat + 1 CSC column pointers
    int* pos;      // BN positions (KEY_SENTINEL past T)
    int* bkt;      // BN buckets
    int* bad;      // BN: n + 1 where key row c of tile n holds a non-finite k or v (forward), or nullptr
    short* row;    // BN * topk CSC key rows within the tile
};

// Load key tile n (layout rows [n * BN, n * BN + BN)): CSC, positions, buckets and V rows read
// through the key order, a non-finite value as 0 (and its key marked n + 1 in t.bad, when
// given: a mark of another tile never matches, so the marks need no clearing). Call between
// two __syncthreads.
template <class DT, int HEAD_DIM>
__device__ __forceinline__ void load_key_tile(const KeyTile& t, const Keys<DT>& g, int n) {
    const int tid = threadIdx.x;
    const int c0 = n * BN;
    const int rows = min(BN, g.seqlen - c0);
    const long long tile = g.bh * g.n_tiles + n;
    for (int f = tid; f <= g.n_feat; f += NT) t.ptr[f] = g.ptr[tile * (g.n_feat + 1) + f];
    for (int e = tid; e < rows * g.topk; e += NT) {
        const short c = g.row[tile * (BN * g.topk) + e];
        const float x = DT::load(g.val[tile * (BN * g.topk) + e]);
        const bool ok = is_finite(x);
        t.row[e] = c;
        t.val[e] = ok ? x : 0.f;
        if (!ok && t.bad != nullptr) t.bad[c] = n + 1;
    }
    for (int c = tid; c < BN; c += NT) {
        bool ok = c < rows;
        t.pos[c] = ok ? g.pos[g.row0 + c0 + c] : KEY_SENTINEL;
        t.bkt[c] = ok ? g.bucket[g.row0 + c0 + c] : -3;
    }
    for (int e = tid; e < BN * HEAD_DIM; e += NT) {
        int c = e / HEAD_DIM, d = e % HEAD_DIM;
        float x = 0.f;
        if (c < rows) x = DT::load(g.v[(long long)g.order[g.row0 + c0 + c] * g.stride_vt + d]);
        if (!is_finite(x)) {
            if (t.bad != nullptr) t.bad[c] = n + 1;
            x = 0.f;
        }
        t.v[c * (HEAD_DIM + 1) + d] = x;
    }
}

// Supports of query rows [r0, r0 + BM) (layout order) into shared memory, read through the
// query order; rows past T keep feature 0 with value 0. With FINITE a non-finite value reads
// as 0 (the dK/dV kernel: its row's lse is then not finite already).
template <class DT, bool FINITE = false>
__device__ __forceinline__ void load_query_supports(short* s_qid, float* s_qval, const int* q_order, const short* q_ids,
                                                    const typename DT::T* q_vals, long long row0, int r0, int seqlen,
                                                    int topk) {
    for (int e = threadIdx.x; e < BM * topk; e += NT) {
        int rr = r0 + e / topk;
        bool ok = rr < seqlen;
        long long src = ok ? (row0 + q_order[row0 + rr]) * topk + e % topk : 0;
        s_qid[e] = ok ? q_ids[src] : (short)0;
        const float x = ok ? DT::load(q_vals[src]) : 0.f;
        s_qval[e] = FINITE && !is_finite(x) ? 0.f : x;
    }
}

// dO of query rows [r0, r0 + BM) into shared memory (row stride HEAD_DIM + 1), zeros past T; a
// non-finite value reads as 0 (its row's delta is not finite: the kernels poison the row by it)
template <int HEAD_DIM>
__device__ __forceinline__ void load_dout_rows(float* s_do, const float* dout, const int* q_order, long long row0,
                                               int r0, int seqlen) {
    for (int e = threadIdx.x; e < BM * HEAD_DIM; e += NT) {
        int ii = e / HEAD_DIM, d = e % HEAD_DIM;
        int rr = r0 + ii;
        const float x = rr < seqlen ? dout[(row0 + q_order[row0 + rr]) * HEAD_DIM + d] : 0.f;
        s_do[ii * (HEAD_DIM + 1) + d] = is_finite(x) ? x : 0.f;
    }
}

// Scores of row i against the key tile, from the support overlaps: for each kept feature of
// the query, walk that feature's column of the tile. Lane l4 adds only into columns
// j = l4 (mod 4), so it owns them. s must be zero on entry.
__device__ __forceinline__ void overlap_scores(float* s_row, const short* q_id, const float* q_val, const KeyTile& t,
                                               int topk, int l4) {
    for (int u = 0; u < topk; ++u) {
        int f = q_id[u];
        float qv = q_val[u];
        int p1 = t.ptr[f + 1];
        for (int p = t.ptr[f]; p < p1; ++p) {
            int c = t.row[p];
            if ((c & 3) == l4) s_row[c] += qv * t.val[p];
        }
    }
}

// One query tile against key tile n, up to the raw scores: wait for the previous tile, load
// key tile n, zero the lane's score columns, and sum the overlaps of row i into s_row.
template <class DT, int HEAD_DIM>
__device__ __forceinline__ void tile_scores(const KeyTile& t, const Keys<DT>& g, int n, float* s_row,
                                            const short* q_id, const float* q_val, int l4) {
    __syncthreads();  // the previous tile is consumed
    load_key_tile<DT, HEAD_DIM>(t, g, n);
    for (int jj = 0; jj < BN / 4; ++jj) s_row[l4 + 4 * jj] = 0.f;
    __syncthreads();
    overlap_scores(s_row, q_id, q_val, t, g.topk, l4);
}

// whether element (row, column j of key tile n) takes part: in bounds, and kept by the
// predicates unless the tile is proven full
__device__ __forceinline__ bool element_kept(bool row_ok, int n, int j, int seqlen, bool masked, int qp, int qb,
                                             const KeyTile& t, int flags) {
    return row_ok && n * BN + j < seqlen && (!masked || keep_element(qp, qb, t.pos[j], t.bkt[j], flags));
}

// dS of element (i, j) = P * (dO_i . V_j - delta_i), P = exp2(s * qk_scale - lse): zero when not kept
template <int HEAD_DIM>
__device__ __forceinline__ float element_ds(float p, const float* dor, const float* vr, float delta_i) {
    float dp = 0.f;
    for (int d = 0; d < HEAD_DIM; ++d) dp += dor[d] * vr[d];
    return p * (dp - delta_i);
}

// The parameters every attention kernel takes, in launch order (op.py): first the group's index
// tensors (both layouts, the block ranges being walked, the head map), then after the query
// supports the compressed keys (sfa_compress_keys) and V with its (b, head, row) strides.
#define SFA_INDEX_PARAMS                                                                                           \
    const int* __restrict__ q_order, const int* __restrict__ q_pos, const int* __restrict__ q_bucket,              \
    const int* __restrict__ k_order, const int* __restrict__ k_pos, const int* __restrict__ k_bucket,              \
    const int* __restrict__ ranges, const int* __restrict__ nseg, const int* __restrict__ head_map
#define SFA_KEY_PARAMS                                                                                             \
    const short* __restrict__ kc_ptr, const short* __restrict__ kc_row, const typename DT::T* __restrict__ kc_val, \
    const typename DT::T* __restrict__ v, long long stride_vb, long long stride_vh, long long stride_vt

// ---------------------------------------------------------------------------------------------
// forward

template <class DT, int HEAD_DIM>
__global__ void __launch_bounds__(NT) sfa_fwd(
    SFA_INDEX_PARAMS, const short* __restrict__ q_ids, const typename DT::T* __restrict__ q_vals, SFA_KEY_PARAMS,
    float* __restrict__ out, float* __restrict__ lse,
    int seqlen, int n_blocks, int n_tiles, int max_seg, int heads_g, int kv_group, int n_feat, int topk,
    float qk_scale, int flags) {
    constexpr int HDP = HEAD_DIM + 1;
    constexpr int SP = BN + 1;
    constexpr int DU = HEAD_DIM / 4;
    static_assert(HEAD_DIM % 4 == 0, "a lane owns every fourth dim");
    extern __shared__ float smem_f[];
    KeyTile t;
    t.v = smem_f;                                   // BN * HDP
    float* s_s = t.v + BN * HDP;                    // BM * SP scores, then probabilities
    t.val = s_s + BM * SP;                          // BN * topk
    float* s_qval = t.val + BN * topk;              // BM * topk
    t.ptr = (int*)(s_qval + BM * topk);             // n_feat + 1
    t.pos = t.ptr + n_feat + 1;                     // BN
    t.bkt = t.pos + BN;                             // BN
    t.bad = t.bkt + BN;                             // BN
    t.row = (short*)(t.bad + BN);                   // BN * topk
    short* s_qid = t.row + BN * topk;               // BM * topk

    const int tid = threadIdx.x, i = tid >> 2, l4 = tid & 3;
    const int m = blockIdx.x, bh = blockIdx.y;
    for (int c = tid; c < BN; c += NT) t.bad[c] = 0;  // before the first tile's barrier
    const Keys<DT> g = program_keys<DT>(k_order, k_pos, k_bucket, kc_ptr, kc_row, kc_val, v, stride_vb, stride_vh,
                                        stride_vt, head_map, heads_g, kv_group, seqlen, n_tiles, n_feat, topk);
    const long long row0 = g.row0;

    const int r = m * BM + i;
    const QueryRow row = query_row(q_order, q_pos, q_bucket, row0, r, seqlen);
    // the block's query supports stay in shared memory for every tile
    load_query_supports<DT>(s_qid, s_qval, q_order, q_ids, q_vals, row0, m * BM, seqlen, topk);

    float acc[DU];
#pragma unroll
    for (int u = 0; u < DU; ++u) acc[u] = 0.f;
    float m_i = NEG_INF, l_i = 0.f;
    float* s_row = s_s + i * SP;

    for (const TileInterval iv : BlockTiles(ranges, nseg, bh, n_blocks, m, max_seg, BN)) {
        for (int n = iv.lo; n < iv.hi; ++n) {
            const bool masked = iv.masked(n);
            tile_scores<DT, HEAD_DIM>(t, g, n, s_row, s_qid + i * topk, s_qval + i * topk, l4);

            // online softmax over the lane's columns, combined across the row's four lanes
            float sv[BN / 4];
            float mx = NEG_INF;
#pragma unroll
            for (int jj = 0; jj < BN / 4; ++jj) {
                int j = l4 + 4 * jj;
                // a kept key holding a non-finite k or v: a NaN score, so the row ends NaN
                sv[jj] = element_kept(row.ok, n, j, seqlen, masked, row.pos, row.bkt, t, flags)
                             ? (t.bad[j] == n + 1 ? QNAN : s_row[j] * qk_scale)
                             : NEG_INF;
                mx = fmaxf(mx, sv[jj]);
            }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float m_new = fmaxf(m_i, mx);
            const float m_safe = m_new == NEG_INF ? 0.f : m_new;  // SCFA's NaN guard
            const float alpha = exp2f(m_i - m_safe);
            float sum = 0.f;
#pragma unroll
            for (int jj = 0; jj < BN / 4; ++jj) {
                float p = exp2f(sv[jj] - m_safe);
                s_row[l4 + 4 * jj] = p;
                sum += p;
            }
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            l_i = l_i * alpha + sum;
            m_i = m_new;
            __syncwarp();  // the row's probabilities, written by its four lanes
#pragma unroll
            for (int u = 0; u < DU; ++u) acc[u] *= alpha;
            for (int j = 0; j < BN; ++j) {
                const float p = s_row[j];
                const float* vr = t.v + j * HDP + l4;
#pragma unroll
                for (int u = 0; u < DU; ++u) acc[u] += p * vr[4 * u];
            }
        }
    }
    const bool empty = l_i == 0.f;
    const float inv = empty ? 0.f : 1.f / l_i;
    if (row.ok) {
        float* o = out + (row0 + row.orig) * HEAD_DIM + l4;
#pragma unroll
        for (int u = 0; u < DU; ++u) o[4 * u] = acc[u] * inv;
        if (l4 == 0) lse[row0 + r] = empty ? POS_INF : m_i + log2f(l_i);
    }
}

// ---------------------------------------------------------------------------------------------
// backward, dQ~: one program per query block, like the forward; dq~ only on kept entries

template <class DT, int HEAD_DIM>
__global__ void __launch_bounds__(NT) sfa_bwd_dq(
    SFA_INDEX_PARAMS, const short* __restrict__ q_ids, const typename DT::T* __restrict__ q_vals, SFA_KEY_PARAMS,
    const float* __restrict__ dout, const float* __restrict__ lse, const float* __restrict__ delta,
    float* __restrict__ dq_vals,
    int seqlen, int n_blocks, int n_tiles, int max_seg, int heads_g, int kv_group, int n_feat, int topk,
    float qk_scale, float scale, int flags) {
    constexpr int HDP = HEAD_DIM + 1;
    constexpr int SP = BN + 1;
    extern __shared__ float smem_f[];
    KeyTile t;
    t.v = smem_f;                                   // BN * HDP
    float* s_do = t.v + BN * HDP;                   // BM * HDP
    float* s_s = s_do + BM * HDP;                   // BM * SP scores, then dS
    t.val = s_s + BM * SP;                          // BN * topk
    float* s_qval = t.val + BN * topk;              // BM * topk
    float* s_dq = s_qval + BM * topk;               // BM * topk
    t.ptr = (int*)(s_dq + BM * topk);               // n_feat + 1
    t.pos = t.ptr + n_feat + 1;                     // BN
    t.bkt = t.pos + BN;                             // BN
    t.bad = nullptr;
    t.row = (short*)(t.bkt + BN);                   // BN * topk
    short* s_qid = t.row + BN * topk;               // BM * topk

    const int tid = threadIdx.x, i = tid >> 2, l4 = tid & 3;
    const int m = blockIdx.x, bh = blockIdx.y;
    const Keys<DT> g = program_keys<DT>(k_order, k_pos, k_bucket, kc_ptr, kc_row, kc_val, v, stride_vb, stride_vh,
                                        stride_vt, head_map, heads_g, kv_group, seqlen, n_tiles, n_feat, topk);
    const long long row0 = g.row0;

    const int r = m * BM + i;
    const QueryRow row = query_row(q_order, q_pos, q_bucket, row0, r, seqlen);
    const float lse_i = row.ok ? lse[row0 + r] : POS_INF;
    const float delta_i = row.ok ? delta[row0 + row.orig] : 0.f;
    load_query_supports<DT>(s_qid, s_qval, q_order, q_ids, q_vals, row0, m * BM, seqlen, topk);
    for (int e = tid; e < BM * topk; e += NT) s_dq[e] = 0.f;
    load_dout_rows<HEAD_DIM>(s_do, dout, q_order, row0, m * BM, seqlen);
    __syncthreads();  // s_dq is zeroed by other threads than its owners (a block with no tile reads it too)
    float* s_row = s_s + i * SP;

    for (const TileInterval iv : BlockTiles(ranges, nseg, bh, n_blocks, m, max_seg, BN)) {
        for (int n = iv.lo; n < iv.hi; ++n) {
            const bool masked = iv.masked(n);
            tile_scores<DT, HEAD_DIM>(t, g, n, s_row, s_qid + i * topk, s_qval + i * topk, l4);
            // dS on the lane's columns, in place of the scores
            for (int jj = 0; jj < BN / 4; ++jj) {
                int j = l4 + 4 * jj;
                float ds = 0.f;
                if (element_kept(row.ok, n, j, seqlen, masked, row.pos, row.bkt, t, flags)) {
                    ds = element_ds<HEAD_DIM>(exp2f(s_row[j] * qk_scale - lse_i), s_do + i * HDP, t.v + j * HDP, delta_i);
                }
                s_row[j] = ds;
            }
            __syncwarp();  // the row's dS, written by its four lanes
            // dq~[i, u] += sum over the tile's keys keeping feature f_u of dS[i, c] k[c, f_u]
            for (int u = l4; u < topk; u += 4) {
                int f = s_qid[i * topk + u];
                float a = 0.f;
                int p1 = t.ptr[f + 1];
                for (int p = t.ptr[f]; p < p1; ++p) a += s_row[t.row[p]] * t.val[p];
                s_dq[i * topk + u] += a;
            }
        }
    }
    if (row.ok) {
        for (int u = l4; u < topk; u += 4) dq_vals[(row0 + row.orig) * topk + u] = s_dq[i * topk + u] * scale;
    }
}

// ---------------------------------------------------------------------------------------------
// backward, dK~ and dV: one program per key block (BN rows of the key layout) against the query
// tiles of its row ranges; dK~ only on the block's kept entries (its CSC), dV dense

template <class DT, int HEAD_DIM>
__global__ void __launch_bounds__(NT) sfa_bwd_dkdv(
    SFA_INDEX_PARAMS, const short* __restrict__ q_ids, const typename DT::T* __restrict__ q_vals,
    const short* __restrict__ k_ids, SFA_KEY_PARAMS,
    const float* __restrict__ dout, const float* __restrict__ lse, const float* __restrict__ delta,
    float* __restrict__ dk_vals, float* __restrict__ dv_out,
    int seqlen, int n_blocks, int n_tiles, int max_seg, int heads_g, int kv_group, int n_feat, int topk,
    float qk_scale, float scale, int flags) {
    constexpr int HDP = HEAD_DIM + 1;
    constexpr int SP = BN + 1;
    constexpr int DU = HEAD_DIM / 4;
    extern __shared__ float smem_f[];
    KeyTile t;
    t.v = smem_f;                                   // BN * HDP
    float* s_do = t.v + BN * HDP;                   // BM * HDP
    float* s_p = s_do + BM * HDP;                   // BM * SP scores, then P
    float* s_ds = s_p + BM * SP;                    // BM * SP
    t.val = s_ds + BM * SP;                         // BN * topk
    float* s_dk = t.val + BN * topk;                // BN * topk, one per CSC entry
    float* s_qval = s_dk + BN * topk;               // BM * topk
    float* s_lse = s_qval + BM * topk;              // BM
    float* s_delta = s_lse + BM;                    // BM
    t.ptr = (int*)(s_delta + BM);                   // n_feat + 1
    t.pos = t.ptr + n_feat + 1;                     // BN
    t.bkt = t.pos + BN;                             // BN
    t.bad = nullptr;
    int* s_qpos = t.bkt + BN;                       // BM
    int* s_qbkt = s_qpos + BM;                      // BM
    t.row = (short*)(s_qbkt + BM);                  // BN * topk
    short* s_feat = t.row + BN * topk;              // BN * topk, the feature of each CSC entry
    short* s_qid = s_feat + BN * topk;              // BM * topk

    const int tid = threadIdx.x, i = tid >> 2, l4 = tid & 3;
    const int n = blockIdx.x, bh = blockIdx.y;
    const Keys<DT> g = program_keys<DT>(k_order, k_pos, k_bucket, kc_ptr, kc_row, kc_val, v, stride_vb, stride_vh,
                                        stride_vt, head_map, heads_g, kv_group, seqlen, n_tiles, n_feat, topk);
    const long long row0 = g.row0;
    const int rows_k = min(BN, seqlen - n * BN);
    const int nnz = rows_k * topk;

    load_key_tile<DT, HEAD_DIM>(t, g, n);
    for (int e = tid; e < BN * topk; e += NT) s_dk[e] = 0.f;
    __syncthreads();
    for (int f = tid; f < n_feat; f += NT) {
        int p1 = t.ptr[f + 1];
        for (int p = t.ptr[f]; p < p1; ++p) s_feat[p] = (short)f;
    }
    float dv[DU];
#pragma unroll
    for (int u = 0; u < DU; ++u) dv[u] = 0.f;
    float* s_row = s_p + i * SP;

    for (const TileInterval iv : BlockTiles(ranges, nseg, bh, n_blocks, n, max_seg, BM)) {
        for (int mt = iv.lo; mt < iv.hi; ++mt) {
            const bool masked = iv.masked(mt);
            __syncthreads();  // the previous query tile is consumed
            load_query_supports<DT, true>(s_qid, s_qval, q_order, q_ids, q_vals, row0, mt * BM, seqlen, topk);
            load_dout_rows<HEAD_DIM>(s_do, dout, q_order, row0, mt * BM, seqlen);
            for (int ii = tid; ii < BM; ii += NT) {
                int rr = mt * BM + ii;
                bool ok = rr < seqlen;
                s_qpos[ii] = ok ? q_pos[row0 + rr] : -1;
                s_qbkt[ii] = ok ? q_bucket[row0 + rr] : -1;
                s_lse[ii] = ok ? lse[row0 + rr] : POS_INF;
                s_delta[ii] = ok ? delta[row0 + q_order[row0 + rr]] : 0.f;
            }
            for (int jj = 0; jj < BN / 4; ++jj) s_row[l4 + 4 * jj] = 0.f;
            __syncthreads();
            overlap_scores(s_row, s_qid + i * topk, s_qval + i * topk, t, topk, l4);
            const bool row_ok = mt * BM + i < seqlen;
            for (int jj = 0; jj < BN / 4; ++jj) {
                int j = l4 + 4 * jj;
                float p = 0.f, ds = 0.f;
                // n is this program's key block: element_kept's column bound is the same as j < rows_k
                if (element_kept(row_ok, n, j, seqlen, masked, s_qpos[i], s_qbkt[i], t, flags)) {
                    p = exp2f(s_row[j] * qk_scale - s_lse[i]);
                    if (!is_finite(s_delta[i])) p = QNAN;  // a row with a non-finite output or dO
                    ds = element_ds<HEAD_DIM>(p, s_do + i * HDP, t.v + j * HDP, s_delta[i]);
                }
                s_row[j] = p;
                s_ds[i * SP + j] = ds;
            }
            __syncthreads();
            // dV[c] += sum_i P[i, c] dO[i]: thread (c = tid / 4, dims l4 mod 4)
            for (int ii = 0; ii < BM; ++ii) {
                const float p = s_p[ii * SP + i];
                const float* dor = s_do + ii * HDP + l4;
#pragma unroll
                for (int u = 0; u < DU; ++u) dv[u] += p * dor[4 * u];
            }
            // dK~ on the CSC entries: query i's feature f_u meets the tile's column f_u
            for (int u = l4; u < topk; u += 4) {
                int f = s_qid[i * topk + u];
                float qv = s_qval[i * topk + u];
                int p1 = t.ptr[f + 1];
                for (int p = t.ptr[f]; p < p1; ++p) atomicAdd(&s_dk[p], s_ds[i * SP + t.row[p]] * qv);
            }
        }
    }
    __syncthreads();
    if (i < rows_k) {
        float* o = dv_out + (row0 + k_order[row0 + n * BN + i]) * HEAD_DIM + l4;
#pragma unroll
        for (int u = 0; u < DU; ++u) o[4 * u] = dv[u];
    }
    for (int e = tid; e < nnz; e += NT) {
        int j = k_order[row0 + n * BN + t.row[e]];
        int f = s_feat[e];
        for (int u = 0; u < topk; ++u) {
            if (k_ids[(row0 + j) * topk + u] == f) dk_vals[(row0 + j) * topk + u] = s_dk[e] * scale;
        }
    }
}
