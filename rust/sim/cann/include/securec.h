/* The bounds-checked memory and string functions of Huawei's libboundscheck (securec.h,
 * libc_sec.so) that the simulated CANN tree's programs use. Part of mspti-lens's simulated CANN
 * tree (docs/simulated_cann.md). */
#ifndef SIM_SECUREC_H_
#define SIM_SECUREC_H_

/* As libboundscheck's securectype.h, this brings in the C library headers its users rely on. */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int errno_t;
#ifndef EOK
#define EOK 0
#endif

errno_t memset_s(void *dest, size_t destMax, int c, size_t count);
errno_t memcpy_s(void *dest, size_t destMax, const void *src, size_t count);
errno_t memmove_s(void *dest, size_t destMax, const void *src, size_t count);
errno_t strcpy_s(char *strDest, size_t destMax, const char *strSrc);
errno_t strncpy_s(char *strDest, size_t destMax, const char *strSrc, size_t count);
errno_t strcat_s(char *strDest, size_t destMax, const char *strSrc);
int sprintf_s(char *strDest, size_t destMax, const char *format, ...);
int snprintf_s(char *strDest, size_t destMax, size_t count, const char *format, ...);
int vsnprintf_s(char *strDest, size_t destMax, size_t count, const char *format, va_list argList);

#ifdef __cplusplus
}
#endif

#endif
