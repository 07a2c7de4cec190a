/* The simulated libc_sec.so: the bounds-checked functions of securec.h (Huawei's libboundscheck)
 * that programs built against the tree use. Each checks its bounds and returns EOK, or an error
 * (libboundscheck's codes) without writing past destMax. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "securec.h"

#define ERANGE_AND_RESET 162
#define EINVAL_AND_RESET 150
#define SECUREC_EINVAL 22
#define SECUREC_ERANGE 34

errno_t memset_s(void *dest, size_t destMax, int c, size_t count)
{
    if (dest == NULL || destMax == 0) {
        return SECUREC_EINVAL;
    }
    if (count > destMax) {
        memset(dest, c, destMax);
        return ERANGE_AND_RESET;
    }
    memset(dest, c, count);
    return EOK;
}

errno_t memcpy_s(void *dest, size_t destMax, const void *src, size_t count)
{
    if (dest == NULL || destMax == 0) {
        return SECUREC_EINVAL;
    }
    if (src == NULL) {
        memset(dest, 0, destMax);
        return EINVAL_AND_RESET;
    }
    if (count > destMax) {
        memset(dest, 0, destMax);
        return ERANGE_AND_RESET;
    }
    memmove(dest, src, count);
    return EOK;
}

errno_t memmove_s(void *dest, size_t destMax, const void *src, size_t count)
{
    return memcpy_s(dest, destMax, src, count);
}

errno_t strncpy_s(char *strDest, size_t destMax, const char *strSrc, size_t count)
{
    if (strDest == NULL || destMax == 0) {
        return SECUREC_EINVAL;
    }
    if (strSrc == NULL) {
        strDest[0] = '\0';
        return EINVAL_AND_RESET;
    }
    size_t n = strnlen(strSrc, count);
    if (n >= destMax) {
        strDest[0] = '\0';
        return ERANGE_AND_RESET;
    }
    memmove(strDest, strSrc, n);
    strDest[n] = '\0';
    return EOK;
}

errno_t strcpy_s(char *strDest, size_t destMax, const char *strSrc)
{
    return strncpy_s(strDest, destMax, strSrc, strSrc == NULL ? 0 : strlen(strSrc));
}

errno_t strcat_s(char *strDest, size_t destMax, const char *strSrc)
{
    if (strDest == NULL || destMax == 0) {
        return SECUREC_EINVAL;
    }
    size_t len = strnlen(strDest, destMax);
    if (len == destMax) {
        strDest[0] = '\0';
        return SECUREC_EINVAL;
    }
    return strcpy_s(strDest + len, destMax - len, strSrc);
}

int vsnprintf_s(char *strDest, size_t destMax, size_t count, const char *format, va_list argList)
{
    if (strDest == NULL || destMax == 0 || format == NULL) {
        return -1;
    }
    size_t limit = count < destMax - 1 ? count + 1 : destMax;
    int n = vsnprintf(strDest, limit, format, argList);
    if (n < 0 || (size_t)n >= limit) {
        if ((size_t)n >= destMax) {
            strDest[0] = '\0';
        }
        return -1;
    }
    return n;
}

int snprintf_s(char *strDest, size_t destMax, size_t count, const char *format, ...)
{
    va_list ap;
    va_start(ap, format);
    int n = vsnprintf_s(strDest, destMax, count, format, ap);
    va_end(ap);
    return n;
}

int sprintf_s(char *strDest, size_t destMax, const char *format, ...)
{
    va_list ap;
    va_start(ap, format);
    int n = vsnprintf_s(strDest, destMax, destMax - 1, format, ap);
    va_end(ap);
    return n;
}
