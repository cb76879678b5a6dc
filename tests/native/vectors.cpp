// C++ side of the native tests: std::vector storage through operator new and
// delete (libstdc++ calls malloc and free). Linked like buffers.c.
#include <cstddef>
#include <cstdint>
#include <vector>

extern "C" {

// A vector of n 64-bit words, filled from seed: one block of exactly n * 8 bytes.
void *ht_vec_new(size_t n, uint64_t seed) {
    auto *v = new std::vector<uint64_t>(n);
    uint64_t x = seed + 1;
    for (auto &w : *v) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        w = x;
    }
    return v;
}

// Doubles the vector's size: libstdc++ grows a full vector of n words to
// n + max(n, added) = exactly 2n words (a new block; the old one is deleted).
void ht_vec_double(void *v) {
    auto *vec = static_cast<std::vector<uint64_t> *>(v);
    vec->resize(vec->size() * 2, 7);
}

// The bytes of the vector's storage block.
size_t ht_vec_bytes(void *v) { return static_cast<std::vector<uint64_t> *>(v)->capacity() * sizeof(uint64_t); }

void ht_vec_free(void *v) { delete static_cast<std::vector<uint64_t> *>(v); }
}
