/* The simulated libascendalog.so: the two functions of CANN's logging library (plog) that
 * MSPTI's code calls (upstream csrc/common/inject/plog_inject.cpp): CheckLogLevelForC and
 * DlogInnerForC. Like plog, it writes to log files, never to the program's output, under the log
 * root $ASCEND_PROCESS_LOG_PATH (else $HOME/ascend/log): debug/plog/plog-<pid>.log. As plog, it
 * creates the log root when it is loaded (the runtime links it, so every ACL program has one;
 * Huawei's st scripts search it for errors). The level threshold is $ASCEND_GLOBAL_LOG_LEVEL (0
 * debug, 1 info, 2 warning, 3 error; default 3). */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

enum { DLOG_DEBUG = 0, DLOG_INFO = 1, DLOG_WARN = 2, DLOG_ERROR = 3 };

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

static int threshold(void)
{
    const char *v = getenv("ASCEND_GLOBAL_LOG_LEVEL");
    if (v == NULL || *v < '0' || *v > '4' || v[1] != '\0') {
        return DLOG_ERROR;
    }
    return *v - '0';
}

int CheckLogLevelForC(int moduleId, int level)
{
    (void)moduleId;
    return level >= threshold() ? 1 : 0;
}

static void mkdirs(char *path)
{
    for (char *p = path + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            mkdir(path, 0750);
            *p = '/';
        }
    }
    mkdir(path, 0750);
}

static void log_root(char *out, size_t len)
{
    const char *base = getenv("ASCEND_PROCESS_LOG_PATH");
    if (base != NULL && *base) {
        snprintf(out, len, "%s", base);
    } else {
        const char *home = getenv("HOME");
        snprintf(out, len, "%s/ascend/log", home != NULL ? home : "/tmp");
    }
}

__attribute__((constructor)) static void create_log_root(void)
{
    char root[4096];
    log_root(root, sizeof root);
    mkdirs(root);
}

static FILE *open_log(void)
{
    char root[3900];
    log_root(root, sizeof root);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/debug/plog", root);
    mkdirs(dir);
    char file[4200];
    snprintf(file, sizeof file, "%s/plog-%d.log", dir, (int)getpid());
    return fopen(file, "a");
}

void DlogInnerForC(int moduleId, int level, const char *fmt, ...)
{
    static const char *names[] = {"DEBUG", "INFO", "WARNING", "ERROR", "EVENT"};
    /* Below the threshold nothing is written, whether or not the caller checked it first. */
    if (fmt == NULL || level < 0 || level > 4 || !CheckLogLevelForC(moduleId, level)) {
        return;
    }
    int saved = errno;
    pthread_mutex_lock(&g_lock);
    FILE *f = open_log();
    if (f != NULL) {
        struct timeval tv;
        gettimeofday(&tv, NULL);
        struct tm tm;
        localtime_r(&tv.tv_sec, &tm);
        fprintf(f, "[%s] MODULE(%d):%04d-%02d-%02d-%02d:%02d:%02d.%06ld ", names[level], moduleId,
                tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (long)tv.tv_usec);
        va_list ap;
        va_start(ap, fmt);
        vfprintf(f, fmt, ap);
        va_end(ap);
        fputc('\n', f);
        fclose(f);
    }
    pthread_mutex_unlock(&g_lock);
    errno = saved;
}
