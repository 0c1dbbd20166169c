/* report.c — what spmd-train tells: the progress line, --metrics JSON
 * lines, the --plot curves, and errors naming the rank and the cause. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "train.h"

double report_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int report_open(report *r, const options *o, int reporter, int rank) {
    memset(r, 0, sizeof *r);
    r->reporter = reporter;
    r->quiet = o->quiet;
    r->tty = isatty(STDOUT_FILENO);
    if (o->metrics && reporter) {
        r->metrics = fopen(o->metrics, "a");
        if (!r->metrics) {
            char e[600];
            snprintf(e, sizeof e, "%s: %s", o->metrics, strerror(errno));
            return -report_fail(rank, "cannot open the metrics file", SPMD_ERR_IO, e);
        }
    }
    return 0;
}

void report_close(report *r) {
    if (r->metrics) fclose(r->metrics);
    free(r->losses);
    free(r->accs);
    memset(r, 0, sizeof *r);
}

void report_say(const report *r, const char *fmt, ...) {
    if (!r->reporter || r->quiet) return;
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout);
}

void report_step(report *r, long step, int epoch, float loss, double sps) {
    if (!r->reporter) return;
    if (r->nlosses == r->cap_losses) {
        size_t nc = r->cap_losses ? 2 * r->cap_losses : 256;
        loss_point *p = realloc(r->losses, nc * sizeof *p);
        if (p) r->losses = p, r->cap_losses = nc;   /* else the plot loses points, training goes on */
    }
    if (r->nlosses < r->cap_losses) r->losses[r->nlosses++] = (loss_point){step, loss};
    if (r->metrics) {
        fprintf(r->metrics, "{\"step\": %ld, \"epoch\": %d, \"loss\": %.6f, \"samples_per_s\": %.1f}\n", step,
                epoch, (double)loss, sps);
        fflush(r->metrics);
    }
}

void report_eval(report *r, int epoch, long step, double acc, long long correct, long long total) {
    if (!r->reporter) return;
    if (r->metrics) {
        fprintf(r->metrics,
                "{\"epoch\": %d, \"step\": %ld, \"test_accuracy\": %.6f, \"test_correct\": %lld, "
                "\"test_total\": %lld}\n",
                epoch, step, acc, correct, total);
        fflush(r->metrics);
    }
    double *a = realloc(r->accs, (size_t)(r->naccs + 1) * sizeof(double));
    if (a) {
        r->accs = a;
        r->accs[r->naccs++] = acc;
    }
}

/* "1:02:03" or "2:03"; "--:--" when not known yet. */
static void format_eta(double sec, char *out, size_t len) {
    if (!(sec >= 0) || sec > 359999) {
        snprintf(out, len, "--:--");
        return;
    }
    long s = (long)(sec + 0.5);
    if (s >= 3600) snprintf(out, len, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
    else snprintf(out, len, "%ld:%02ld", s / 60, s % 60);
}

/* One progress line.  On a terminal it is rewritten in place and kept
 * narrower than the terminal (80 columns when unknown), the bar shrinking
 * or going first, so it never wraps and scrolls; otherwise one line per
 * report.  eta_s: seconds the remaining steps should take (< 0: unknown). */
void report_progress(const report *r, int epoch, int epochs, long step_in_epoch, long steps_per_epoch,
                     long global_step, float loss, double sps, double eta_s, int final) {
    if (!r->reporter || r->quiet) return;
    char eta[24], text[160];
    format_eta(eta_s, eta, sizeof eta);
    if (r->tty) {
        int cols = 80;
        struct winsize ws;
        if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) cols = ws.ws_col;
        int room = cols - 1;
        int n = snprintf(text, sizeof text, " %ld/%ld loss %.4f %.0f/s ETA %s", step_in_epoch, steps_per_epoch,
                         (double)loss, sps, eta);
        char head[32];
        int hn = snprintf(head, sizeof head, "epoch %d/%d", epoch + 1, epochs);
        int width = room - hn - n - 3;   /* " [" and "]" around the bar */
        if (width > 20) width = 20;
        char bar[24] = "";
        if (width >= 5) {
            int filled = steps_per_epoch ? (int)(width * step_in_epoch / steps_per_epoch) : width;
            for (int i = 0; i < width; i++) bar[i] = i < filled ? '#' : '.';
            bar[width] = 0;
        }
        char line[256];
        if (bar[0]) snprintf(line, sizeof line, "%s [%s]%s", head, bar, text);
        else snprintf(line, sizeof line, "%s%s", head, text);
        if ((int)strlen(line) > room && room > 0) line[room] = 0;
        /* \033[K clears what a longer previous line left */
        printf("\r%s\033[K%s", line, final ? "\n" : "");
    } else {
        printf("epoch %d step %ld/%ld (total %ld) loss %.4f %.0f samples/s ETA %s\n", epoch + 1, step_in_epoch,
               steps_per_epoch, global_step, (double)loss, sps, eta);
    }
    fflush(stdout);
}

static int find_in_path(const char *prog) {
    const char *p = getenv("PATH");
    if (!p) p = "/usr/bin:/bin";
    while (*p) {
        const char *e = strchr(p, ':');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        char full[4096];
        if (n && n < sizeof full - strlen(prog) - 2) {
            snprintf(full, sizeof full, "%.*s/%s", (int)n, p, prog);
            if (access(full, X_OK) == 0) return 1;
        }
        p += n + (e ? 1 : 0);
    }
    return 0;
}

int report_plot(const report *r, const options *o, int world) {
    if (!r->reporter || !o->plot) return 0;
    if (!find_in_path("gnuplot")) {
        fprintf(stderr, "spmd-train: --plot needs gnuplot, which is not installed (Debian: apt-get "
                        "install gnuplot-nox)%s%s\n",
                o->metrics ? "; the curves are in " : "", o->metrics ? o->metrics : "");
        return -1;
    }
    /* gnuplot writes the image to its stdout when it cannot open the file:
     * never onto the terminal */
    FILE *gp = popen("gnuplot >/dev/null", "w");
    if (!gp) {
        fprintf(stderr, "spmd-train: cannot start gnuplot: %s\n", strerror(errno));
        return -1;
    }
    (void)remove(o->plot);   /* so a missing file below means gnuplot failed */
    fprintf(gp, "$loss << EOD\n");
    for (size_t i = 0; i < r->nlosses; i++) fprintf(gp, "%ld %.6g\n", r->losses[i].step, (double)r->losses[i].loss);
    fprintf(gp, "EOD\n$acc << EOD\n");
    for (int i = 0; i < r->naccs; i++) fprintf(gp, "%d %.6g\n", i + 1, r->accs[i]);
    fprintf(gp, "EOD\n");
    fprintf(gp, "set terminal pngcairo size 1100,420\nset output '%s'\n", o->plot);
    fprintf(gp, "set multiplot layout 1,2 title 'spmd-train %s on %s, world %d, batch %d per replica'\n", o->model,
            o->dataset, world, o->batch);
    fprintf(gp, "set grid\nset xlabel 'step'\nset ylabel 'loss'\nset title 'training loss'\n");
    fprintf(gp, "plot $loss using 1:2 with lines notitle\n");
    fprintf(gp, "set xlabel 'epoch'\nset ylabel 'accuracy'\nset title 'test accuracy'\n");
    fprintf(gp, "set xrange [0:%d]\nset yrange [0:1]\n", r->naccs + 1);
    if (r->naccs) fprintf(gp, "plot $acc using 1:2 with linespoints pt 7 notitle\n");
    else fprintf(gp, "set label 1 'no epoch evaluated' at graph 0.5,0.5 center\nplot NaN notitle\n");
    fprintf(gp, "unset multiplot\n");
    int rc = pclose(gp);
    struct stat sb;
    if (rc != 0 || stat(o->plot, &sb) != 0 || sb.st_size == 0) {
        fprintf(stderr, "spmd-train: gnuplot failed (status %d) writing %s\n", rc, o->plot);
        return -1;
    }
    report_say(r, "plot written to %s\n", o->plot);
    return 0;
}

/* The status' text is a category ("ranks disagree (size, dtype, root or
 * shape)" for any SPMD_ERR_MISMATCH, "protocol violation" ...): when err
 * explains what happened, it alone is the cause. */
int report_fail(int rank, const char *what, spmd_status st, const char *err) {
    if (rank >= 0) fprintf(stderr, "spmd-train: rank %d: %s: %s\n", rank, what, err && *err ? err : spmd_status_str(st));
    else fprintf(stderr, "spmd-train: %s: %s\n", what, err && *err ? err : spmd_status_str(st));
    return 1;
}

int report_env_rank(void) {
    /* the launchers' families, in the order the library reads them */
    static const char *const vars[] = {"RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID", "PMI_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        char *end;
        long r = v && *v ? strtol(v, &end, 10) : -1;
        if (v && *v && !*end && r >= 0 && r < (1L << 24)) return (int)r;
    }
    return -1;
}
