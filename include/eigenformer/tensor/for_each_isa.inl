// Compiles the kernel text named by EIGENFORMER_ISA_BODY (a quoted include path) once per instruction set:
// inside namespace avx512 and inside namespace avx2, each within that set's target region (cpu_isa.hpp),
// where SimdFloat and this_isa (simd.hpp) are that set's. sgemm_kernel.hpp and gemv.hpp use it for their
// kernels; a new instruction set is one more block here. Included where EIGENFORMER_X86_KERNELS is defined.
// No include guard, on purpose.
#if !defined(EIGENFORMER_ISA_BODY) || !defined(EIGENFORMER_X86_KERNELS)
#error "for_each_isa.inl needs EIGENFORMER_ISA_BODY and the target regions of cpu_isa.hpp"
#endif

EIGENFORMER_TARGET_AVX512_BEGIN
namespace eigenformer::backend::detail::avx512 {
#include EIGENFORMER_ISA_BODY
}  // namespace eigenformer::backend::detail::avx512
EIGENFORMER_TARGET_END

EIGENFORMER_TARGET_AVX2_BEGIN
namespace eigenformer::backend::detail::avx2 {
#include EIGENFORMER_ISA_BODY
}  // namespace eigenformer::backend::detail::avx2
EIGENFORMER_TARGET_END
