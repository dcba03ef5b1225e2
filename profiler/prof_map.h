/* prof_map.h — the profiler's one hash map: 64-bit keys (host or device addresses, CUPTI
 * correlation ids) to 64-bit values. The tracked allocator keeps its live pointers in it, the
 * CUPTI session its launch hints and the device allocations it replays.
 *
 * Open addressing with linear probing over a power-of-two table that doubles when an insert
 * would pass 70 % load; deletion shifts the rest of the probe run back (no tombstones, so a
 * table that sees many alloc/free pairs never fills with dead slots). Key 0 marks an empty
 * slot and cannot be stored: no caller has a NULL pointer, address 0 or correlation id 0 to
 * keep. Expected O(1) per operation.
 *
 *   ProfMap m = {0};                   // zeroed is an empty map; the table comes with the first put
 *   prof_map_put(&m, key, value);      // insert or replace
 *   prof_map_take(&m, key, &value);    // remove, returning the value
 *   prof_map_free(&m);
 *
 * The struct is transparent only so it can be embedded; its fields are the module's. */
#ifndef PROF_MAP_H
#define PROF_MAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t key;             /* 0: empty */
    uint64_t val;
} ProfMapSlot;

typedef struct {
    ProfMapSlot *slots;
    size_t cap;               /* slots, a power of two (0 before the first put) */
    size_t used;              /* keys stored */
} ProfMap;

/* Inserts key or replaces its value. 0, or -1 for key 0 or when the table cannot grow (the
 * map is then unchanged). */
int prof_map_put(ProfMap *m, uint64_t key, uint64_t val);
/* 1 and the value in *val (val may be NULL) if key is stored, else 0. */
int prof_map_get(const ProfMap *m, uint64_t key, uint64_t *val);
/* Removes key: 1 and its value in *val (val may be NULL) if it was stored, else 0. */
int prof_map_take(ProfMap *m, uint64_t key, uint64_t *val);
size_t prof_map_count(const ProfMap *m);
/* Iteration in table order: start with *pos = 0; returns 0 after the last entry. The map must
 * not change during the walk. */
int prof_map_next(const ProfMap *m, size_t *pos, uint64_t *key, uint64_t *val);
void prof_map_free(ProfMap *m);   /* back to the empty map */

/* The hash that picks a key's home slot (home = hash & (cap - 1)): exposed so tests can make
 * keys that collide. */
uint64_t prof_map_hash(uint64_t key);

#endif
