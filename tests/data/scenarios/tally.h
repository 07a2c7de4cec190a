/* Counts by name, printed as "<label> <name> <count>" lines, for the scenarios' outputs. */
#ifndef SCENARIO_TALLY_H
#define SCENARIO_TALLY_H

#define TALLY_NAMES 64

typedef struct {
    const char *label;
    char names[TALLY_NAMES][128];
    unsigned long counts[TALLY_NAMES];
    int used;
} Tally;

void tally_add(Tally *t, const char *name);
void tally_print(const Tally *t);

#endif
