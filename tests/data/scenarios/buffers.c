#include "buffers.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#define BUFFER_BYTES (1u << 20)

struct done {
    uint8_t *buffer;
    size_t valid;
    struct done *next;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct done *head, **tail = &head;

static void request(uint8_t **buffer, size_t *size, size_t *max_records)
{
    *buffer = aligned_alloc(8, BUFFER_BYTES);
    *size = *buffer ? BUFFER_BYTES : 0;
    *max_records = 0;
}

static void complete(uint8_t *buffer, size_t size, size_t valid)
{
    (void)size;
    struct done *d = malloc(sizeof *d);
    if (d == NULL) {
        free(buffer);
        return;
    }
    d->buffer = buffer;
    d->valid = valid;
    d->next = NULL;
    pthread_mutex_lock(&lock);
    *tail = d;
    tail = &d->next;
    pthread_mutex_unlock(&lock);
}

msptiResult buffers_register(void) { return msptiActivityRegisterCallbacks(request, complete); }

size_t buffers_walk(void (*on_record)(const msptiActivity *record, size_t bytes))
{
    pthread_mutex_lock(&lock);
    struct done *d = head;
    head = NULL;
    tail = &head;
    pthread_mutex_unlock(&lock);
    size_t n = 0;
    while (d != NULL) {
        msptiActivity *record = NULL, *prev = NULL;
        while (msptiActivityGetNextRecord(d->buffer, d->valid, &record) == MSPTI_SUCCESS) {
            if (prev) on_record(prev, (size_t)((uint8_t *)record - (uint8_t *)prev));
            prev = record;
            n++;
        }
        if (prev) on_record(prev, (size_t)(d->buffer + d->valid - (uint8_t *)prev));
        struct done *next = d->next;
        free(d->buffer);
        free(d);
        d = next;
    }
    return n;
}
