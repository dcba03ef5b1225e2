/* prof_map.c — open addressing, linear probing, backward-shift deletion (see prof_map.h). */
#include "prof_map.h"

#include <stdlib.h>

#define MAP_MIN_CAP 64   /* slots at the first put */

uint64_t prof_map_hash(uint64_t k)
{
    /* murmur3's 64-bit finalizer: allocator addresses share their low bits (alignment) and
       correlation ids are consecutive, so the raw key would crowd a few slots */
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return k;
}

static size_t home_of(const ProfMap *m, uint64_t key) { return (size_t)prof_map_hash(key) & (m->cap - 1); }

/* The slot holding key, or the empty slot where its probe run ends. The table is never full
 * (load <= 70 %), so the walk ends. */
static size_t probe(const ProfMap *m, uint64_t key)
{
    size_t i = home_of(m, key);
    while (m->slots[i].key && m->slots[i].key != key) i = (i + 1) & (m->cap - 1);
    return i;
}

static int grow(ProfMap *m)
{
    size_t ncap = m->cap ? m->cap * 2 : MAP_MIN_CAP;
    ProfMapSlot *fresh = calloc(ncap, sizeof *fresh);
    if (!fresh) return -1;
    ProfMap bigger = {fresh, ncap, m->used};
    for (size_t i = 0; i < m->cap; i++)
        if (m->slots[i].key) bigger.slots[probe(&bigger, m->slots[i].key)] = m->slots[i];
    free(m->slots);
    *m = bigger;
    return 0;
}

int prof_map_put(ProfMap *m, uint64_t key, uint64_t val)
{
    if (!key) return -1;
    if ((m->used + 1) * 10 > m->cap * 7 && grow(m)) return -1;   /* load stays <= 70 % */
    size_t i = probe(m, key);
    if (!m->slots[i].key) m->used++;
    m->slots[i] = (ProfMapSlot){key, val};
    return 0;
}

int prof_map_get(const ProfMap *m, uint64_t key, uint64_t *val)
{
    if (!key || !m->cap) return 0;
    const ProfMapSlot *s = &m->slots[probe(m, key)];
    if (!s->key) return 0;
    if (val) *val = s->val;
    return 1;
}

int prof_map_take(ProfMap *m, uint64_t key, uint64_t *val)
{
    if (!key || !m->cap) return 0;
    size_t mask = m->cap - 1, hole = probe(m, key);
    if (!m->slots[hole].key) return 0;
    if (val) *val = m->slots[hole].val;
    /* Backward shift: an entry later in the run moves into the hole unless its home lies
       cyclically in (hole, j], where a lookup starting at home would no longer pass the hole. */
    for (size_t j = (hole + 1) & mask; m->slots[j].key; j = (j + 1) & mask) {
        size_t home = home_of(m, m->slots[j].key);
        if (((j - home) & mask) >= ((j - hole) & mask)) {
            m->slots[hole] = m->slots[j];
            hole = j;
        }
    }
    m->slots[hole] = (ProfMapSlot){0, 0};
    m->used--;
    return 1;
}

size_t prof_map_count(const ProfMap *m) { return m->used; }

int prof_map_next(const ProfMap *m, size_t *pos, uint64_t *key, uint64_t *val)
{
    for (; *pos < m->cap; (*pos)++) {
        const ProfMapSlot *s = &m->slots[*pos];
        if (!s->key) continue;
        if (key) *key = s->key;
        if (val) *val = s->val;
        (*pos)++;
        return 1;
    }
    return 0;
}

void prof_map_free(ProfMap *m)
{
    free(m->slots);
    *m = (ProfMap){0};
}
