/* A stand-in for the SDK's <string.h>, for `scripts/check-macos` only (see TargetConditionals.h). */
#pragma once
#include <stddef.h>
void *memcpy(void *dst, const void *src, size_t n);
void *memmove(void *dst, const void *src, size_t n);
void *memset(void *dst, int c, size_t n);
int memcmp(const void *a, const void *b, size_t n);
