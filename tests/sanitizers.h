// Which sanitizer a test is built under, for gcc (__SANITIZE_*__) and clang
// (__has_feature) alike: FT_TEST_ASAN, FT_TEST_TSAN.
//
// Both limit what a forked child of a multithreaded test may do: TSan cannot
// start threads there ("dup thread with used id"), and the ASan of GCC 12
// and clang 14 takes no allocator lock around fork, so such a child can hang
// in its first malloc, in any program.
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define FT_TEST_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#define FT_TEST_TSAN 1
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer) && !defined(FT_TEST_ASAN)
#define FT_TEST_ASAN 1
#endif
#if __has_feature(thread_sanitizer) && !defined(FT_TEST_TSAN)
#define FT_TEST_TSAN 1
#endif
#endif
