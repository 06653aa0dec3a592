/* tracer._core._speedups, one of its parts: the blocks a take's encoding reuses.
 * Included once, in order, by _speedups.c (one translation unit: the parts share its static
 * state and helpers); see _speedups.c for the whole.
 *
 * Each take() encodes its records (about 40 bytes an event), notes where each event starts (8
 * bytes an event), and the sender copies each batch's share of them into one msgpack array: a few
 * MiB a drain for a busy thread. From the C library's malloc, blocks that large are new mapped
 * pages every time (glibc maps them, or gives a freed heap top back), and a VM here takes a page
 * fault on the first write to each page: measured, 33 faults and about 100 ns of the sender's
 * system time per traced call of a busy loop (docs/performance.md, "Blocks the sender reuses").
 * So these blocks come from here instead: mapped pages, a power of two of 64 KiB or more, kept
 * when freed (up to POOL_SLOTS of them and POOL_MAX_BYTES in all) and handed out again, already
 * backed. An idle process gives them back (release_pool(), called by a drain that took nothing).
 * Everything here runs with the GIL held. */

#define POOL_MIN_BYTES ((size_t)64 * 1024)
#define POOL_SLOTS 8
#define POOL_MAX_BYTES ((size_t)32 * 1024 * 1024)

typedef struct {
    char *data;
    size_t capacity;
} PoolBlock;

static PoolBlock g_pool[POOL_SLOTS];
static size_t g_pool_bytes; /* the kept blocks' capacities, together */

/* A block of at least `wanted` bytes, its size in *capacity: the smallest kept one that is big
 * enough, else new mapped pages. NULL (no exception set): no memory. */
static char *
pool_get(size_t wanted, size_t *capacity)
{
    int best = -1;
    for (int i = 0; i < POOL_SLOTS; i++) {
        if (g_pool[i].data != NULL && g_pool[i].capacity >= wanted
            && (best < 0 || g_pool[i].capacity < g_pool[best].capacity)) {
            best = i;
        }
    }
    if (best >= 0) {
        char *data = g_pool[best].data;
        *capacity = g_pool[best].capacity;
        g_pool[best].data = NULL;
        g_pool_bytes -= *capacity;
        return data;
    }
    size_t size = POOL_MIN_BYTES;
    while (size < wanted) {
        size *= 2;
    }
    void *mapped = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mapped == MAP_FAILED) {
        return NULL;
    }
    *capacity = size;
    return mapped;
}

/* Done with a block from pool_get: kept for the next one while there is room, else unmapped.
 * When every slot is taken, the smallest kept block makes way for a bigger one. */
static void
pool_put(char *data, size_t capacity)
{
    if (data == NULL) {
        return;
    }
    int slot = -1;
    for (int i = 0; i < POOL_SLOTS; i++) {
        if (g_pool[i].data == NULL) {
            slot = i;
            break;
        }
        if (g_pool[i].capacity < capacity
            && (slot < 0 || g_pool[i].capacity < g_pool[slot].capacity)) {
            slot = i;
        }
    }
    if (slot >= 0 && g_pool[slot].data != NULL) { /* the smallest, smaller than this one */
        munmap(g_pool[slot].data, g_pool[slot].capacity);
        g_pool_bytes -= g_pool[slot].capacity;
        g_pool[slot].data = NULL;
    }
    if (slot < 0 || g_pool_bytes + capacity > POOL_MAX_BYTES) {
        munmap(data, capacity);
        return;
    }
    g_pool[slot].data = data;
    g_pool[slot].capacity = capacity;
    g_pool_bytes += capacity;
}

/* Unmap every kept block (an idle process's drain, and a test). */
static void
pool_release(void)
{
    for (int i = 0; i < POOL_SLOTS; i++) {
        if (g_pool[i].data != NULL) {
            munmap(g_pool[i].data, g_pool[i].capacity);
            g_pool[i].data = NULL;
        }
    }
    g_pool_bytes = 0;
}
