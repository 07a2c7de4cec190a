/* Activity buffers as the Activity API wants them handled: MSPTI asks for an empty buffer
 * (request) and hands full ones back (complete), possibly on its own threads and under its record
 * lock, so the complete callback only queues the buffer; the program walks the queued buffers
 * itself, after msptiActivityFlushAll. */
#ifndef SCENARIO_BUFFERS_H
#define SCENARIO_BUFFERS_H

#include <stddef.h>

#include "mspti.h"

/* Register the request and complete callbacks with MSPTI. */
msptiResult buffers_register(void);

/* Each record of every buffer handed back so far, in order, with the bytes it takes in its
 * buffer (up to the next record, or to the buffer's end); the buffers are freed. Returns the
 * number of records. */
size_t buffers_walk(void (*on_record)(const msptiActivity *record, size_t bytes));

#endif
