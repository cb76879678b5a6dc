/* C side of the native tests (tests/native_*.rs): buffers through malloc and
 * realloc, freed by whichever thread the Rust test picks, and a constructor
 * that allocates before main. Linked only into the root crate's test
 * binaries, and only with the `native` feature (build.rs). */
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A buffer of n bytes filled from seed (a mixed fill, so fingerprints tell copies apart). */
unsigned char *ht_buf_new(size_t n, uint64_t seed) {
    unsigned char *p = malloc(n);
    if (!p) return NULL;
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        p[i] = (unsigned char)x;
    }
    return p;
}

/* Grows (or shrinks) a buffer; the new tail is left as realloc gives it. */
unsigned char *ht_buf_resize(unsigned char *p, size_t n) { return realloc(p, n); }

void ht_buf_free(unsigned char *p) { free(p); }

/* Allocated by a constructor, before main and before heaptag starts. */
static unsigned char *early;
static size_t early_usable;

__attribute__((constructor)) static void ht_early(void) {
    early = malloc(100000);
    if (early) {
        memset(early, 0x5a, 100000);
        early_usable = malloc_usable_size(early);
    }
}

/* The constructor's block (ownership passes to the caller) and its usable size then. */
unsigned char *ht_early_take(size_t *usable) {
    unsigned char *p = early;
    early = NULL;
    *usable = early_usable;
    return p;
}

/* Edge cases of the malloc family, in C: returns 0 when all hold, else the number of the first failure. */
int ht_edge_cases(void) {
    free(NULL);
    void *p = realloc(NULL, 100);
    if (!p) return 1;
    if (malloc_usable_size(p) < 100) return 2;
    if (realloc(p, 0) != NULL) return 3; /* glibc: frees, returns NULL */
    void *q = NULL;
    if (posix_memalign(&q, 3, 64) != 22 /* EINVAL */ || q != NULL) return 4;
    if (posix_memalign(&q, 4096, 10000) != 0 || ((uintptr_t)q & 4095) != 0) return 5;
    free(q);
    void *a = aligned_alloc(1 << 16, 1 << 16);
    if (!a || ((uintptr_t)a & 0xffff) != 0) return 6;
    free(a);
    void *m = memalign(24, 100); /* rounded up to 32, as glibc does */
    if (!m || ((uintptr_t)m & 31) != 0) return 7;
    free(m);
    void *v = valloc(10);
    if (!v || ((uintptr_t)v & 4095) != 0) return 8;
    free(v);
    void *pv = pvalloc(1);
    if (!pv || malloc_usable_size(pv) < 4096) return 9;
    free(pv);
    void *c = calloc(1000, 1000);
    if (!c) return 10;
    for (int i = 0; i < 1000000; i += 4096)
        if (((unsigned char *)c)[i]) return 11;
    free(c);
    volatile size_t huge = SIZE_MAX / 2; /* volatile: no compile-time size warnings */
    errno = 0;
    if (calloc(huge, 4) != NULL || errno != 12 /* ENOMEM */) return 12;
    errno = 0;
    if (malloc(huge) != NULL || errno != 12) return 13;
    if (malloc_trim(0) != 1) return 14;
    errno = 0;
    if (aligned_alloc(24, 100) != NULL || errno != 22 /* EINVAL: C17, glibc >= 2.38 */) return 15;
    /* free never changes errno (glibc >= 2.33, POSIX.1-2024), small or tracked. */
    void *s = malloc(100), *t = malloc(1 << 20);
    if (!s || !t) return 16;
    errno = 77;
    free(s);
    free(t);
    if (errno != 77) return 17;
    return 0;
}
