// Shared by every kernel source of the CuPy backend: compile.source() puts this text in front of
// each .cu file (no #include, so NVRTC needs no include path). 16-bit floats are read and
// rounded with PTX instead of cuda_fp16.h / cuda_bf16.h for the same reason.

// +inf and -inf without math headers
#define POS_INF __uint_as_float(0x7f800000u)
#define NEG_INF __uint_as_float(0xff800000u)
#define QNAN __uint_as_float(0x7fc00000u)

// false for inf and NaN
static __device__ __forceinline__ bool is_finite(float x) { return fabsf(x) < POS_INF; }

// element types: T is the storage, load() widens to float, round() rounds a float to T's precision
struct F32 {
    typedef float T;
    static __device__ __forceinline__ float load(float x) { return x; }
    static __device__ __forceinline__ float round(float x) { return x; }
};
struct F16 {
    typedef unsigned short T;
    static __device__ __forceinline__ float load(unsigned short x) {
        float f;
        asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x));
        return f;
    }
    static __device__ __forceinline__ float round(float x) {
        unsigned short h;
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
        return load(h);
    }
};
struct BF16 {
    typedef unsigned short T;
    static __device__ __forceinline__ float load(unsigned short x) { return __uint_as_float(((unsigned int)x) << 16); }
    static __device__ __forceinline__ float round(float x) {
        unsigned short h;
        asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(x));
        return load(h);
    }
};
