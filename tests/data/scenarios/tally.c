#include "tally.h"

#include <stdio.h>
#include <string.h>

void tally_add(Tally *t, const char *name)
{
    if (name == NULL) name = "";
    for (int i = 0; i < t->used; i++) {
        if (strcmp(t->names[i], name) == 0) {
            t->counts[i]++;
            return;
        }
    }
    if (t->used == TALLY_NAMES) {
        printf("%s too-many-names 1\n", t->label);
        return;
    }
    snprintf(t->names[t->used], sizeof t->names[0], "%s", name);
    t->counts[t->used++] = 1;
}

void tally_print(const Tally *t)
{
    for (int i = 0; i < t->used; i++) printf("%s %s %lu\n", t->label, t->names[i][0] ? t->names[i] : "-", t->counts[i]);
}
