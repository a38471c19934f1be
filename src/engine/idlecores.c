/*-------------------------------------------------------------------------
 *
 * idlecores.c
 *	  How many of the machine's cores were idle between two readings, for
 *	  the foreground throttle (pacing.c).
 *
 * Client sessions at work (health.c) say the foreground is busy, not that
 * the machine is: on a box at half its capacity the sessions are often as
 * many as half the cores while a core is still free, and a lane that
 * works there costs the foreground little.  The kernel's own counters
 * (the aggregate "cpu" line of /proc/stat: time spent idle or waiting for
 * I/O, and in all, since boot) give the idle cores between two readings
 * of this process.  Where there is no /proc/stat, or the first reading,
 * the answer is -1: unknown, and the throttle goes by the sessions alone.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <unistd.h>

#include "storage/fd.h"

#include "idlecores.h"

static unsigned long long last_idle = 0;
static unsigned long long last_total = 0;

/* the "cpu" line's idle and total ticks; false when it cannot be read */
static bool
read_cpu_ticks(unsigned long long *idle, unsigned long long *total)
{
	FILE	   *f = AllocateFile("/proc/stat", "r");
	unsigned long long v[8] = {0};
	int			n;

	if (f == NULL)
		return false;
	n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu",
			   &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]);
	FreeFile(f);
	if (n < 5)
		return false;
	/* user nice system idle iowait irq softirq steal */
	*idle = v[3] + v[4];
	*total = v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
	return true;
}

/*
 * The idle cores since the previous call of this process (0 .. cores), or
 * -1 when unknown (no /proc/stat, the first call, no tick since the last).
 */
double
idle_cores_since_last(int cores)
{
	unsigned long long idle;
	unsigned long long total;
	double		answer = -1;

	if (!read_cpu_ticks(&idle, &total))
		return -1;
	if (last_total != 0 && total > last_total && idle >= last_idle)
		answer = cores * (double) (idle - last_idle) / (double) (total - last_total);
	last_idle = idle;
	last_total = total;
	return answer;
}
