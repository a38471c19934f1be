/*-------------------------------------------------------------------------
 *
 * windows.c
 *	  Time windows of a declaration: when its lanes may work.
 *
 * A window is days and/or a time range of the declaration's time zone:
 * "Mon-Fri 22:00-06:00", "Sat-Sun", "09:00-17:00", "Mon,Wed 01:00-03:00".
 * Days alone are whole days; a time range alone is every day.  A range
 * that ends before it starts runs past midnight and belongs to the day it
 * starts: "Fri 22:00-06:00" is Friday 22:00 to Saturday 06:00.  Times are
 * wall-clock times of the zone, so a window keeps its hours across a
 * daylight saving change (the day it changes it is an hour shorter or
 * longer).  No windows: always inside.
 *
 * The lanes (pacing.c) and the scheduler ask windows_inside before work;
 * backfill_status asks backfill.window_at for the next start.  Nothing here
 * runs SQL: the scheduler's loop and reports may call it.  A test moves
 * the clock windows are judged by with backfill.windows_clock_offset
 * (seconds; 0 in production), for every caller at once.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <ctype.h>

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/timestamp.h"

#include "config.h"
#include "catalog.h"
#include "errors.h"
#include "windows.h"

PG_FUNCTION_INFO_V1(backfill_window_at);

static const char *const day_names[7] = {"sun", "mon", "tue", "wed", "thu", "fri", "sat"};

/* a refusal of windows: BF011, with the accepted form */
static void
refuse(const char *name, const char *window, const char *why)
{
	ereport(ERROR,
			(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
			 name ? errmsg("windows of backfill \"%s\" are not valid", name) :
			 errmsg("windows are not valid"),
			 window ? errdetail("\"%s\": %s.", window, why) : errdetail("%s.", why),
			 errhint(WINDOWS_HINT)));
}

/* a day's name at *p (3 letters, any case): 0 Sunday .. 6 Saturday, -1 none */
static int
read_day(const char **p)
{
	for (int d = 0; d < 7; d++)
		if (pg_strncasecmp(*p, day_names[d], 3) == 0 && !isalpha((unsigned char) (*p)[3]))
		{
			*p += 3;
			return d;
		}
	return -1;
}

/* "Mon", "Mon-Fri", "Fri-Mon", "Mon,Wed-Thu": the mask, 0 when malformed */
static uint8
read_days(const char *text)
{
	const char *p = text;
	uint8		mask = 0;

	for (;;)
	{
		int			from = read_day(&p);
		int			to = from;

		if (from < 0)
			return 0;
		if (*p == '-')
		{
			p++;
			if ((to = read_day(&p)) < 0)
				return 0;
		}
		for (int d = from;; d = (d + 1) % 7)
		{
			mask |= 1 << d;
			if (d == to)
				break;
		}
		if (*p == '\0')
			return mask;
		if (*p++ != ',')
			return 0;
	}
}

/* "HH:MM" at *p: minutes after midnight (24:00 only if may_end), -1 when malformed */
static int
read_time(const char **p, bool may_end)
{
	const char *s = *p;
	int			h,
				m;

	if (!isdigit((unsigned char) s[0]) || !isdigit((unsigned char) s[1]) || s[2] != ':' ||
		!isdigit((unsigned char) s[3]) || !isdigit((unsigned char) s[4]))
		return -1;
	h = (s[0] - '0') * 10 + (s[1] - '0');
	m = (s[3] - '0') * 10 + (s[4] - '0');
	if (m > 59 || h > 24 || (h == 24 && (m != 0 || !may_end)))
		return -1;
	*p = s + 5;
	return h * 60 + m;
}

/* "22:00-06:00" into w; false when malformed */
static bool
read_range(const char *text, Window *w, bool *empty)
{
	const char *p = text;
	int			start = read_time(&p, false);
	int			end;

	if (start < 0 || *p++ != '-')
		return false;
	if ((end = read_time(&p, true)) < 0 || *p != '\0')
		return false;
	*empty = (end == start);
	w->start_min = start;
	w->length_min = end > start ? end - start : end + 24 * 60 - start;
	return true;
}

/* one element: "[days] [HH:MM-HH:MM]", at least one of them */
static void
parse_window(const char *name, const char *text, Window *w)
{
	char	   *copy = pstrdup(text);
	char	   *words[3];
	int			n = 0;
	bool		empty = false;
	char	   *save = NULL;

	for (char *tok = strtok_r(copy, " \t", &save); tok != NULL; tok = strtok_r(NULL, " \t", &save))
	{
		if (n == 2)
			refuse(name, text, "a window is days, a time range, or days and a time range");
		words[n++] = tok;
	}
	w->days = 0x7f;
	w->start_min = 0;
	w->length_min = 24 * 60;
	if (n == 0)
		refuse(name, text, "the window is empty");
	if (n == 2 || isalpha((unsigned char) words[0][0]))
	{
		if ((w->days = read_days(words[0])) == 0)
			refuse(name, text, "the days are not written as Mon, Mon-Fri or Mon,Wed");
		if (n == 1)
			return;
	}
	if (!read_range(words[n - 1], w, &empty))
		refuse(name, text, "the time range is not written as HH:MM-HH:MM (00:00 to 24:00)");
	if (empty)
		refuse(name, text, "the window starts where it ends, so it is empty");
}

pg_tz *
windows_time_zone(const char *name, const char *time_zone)
{
	pg_tz	   *tz;

	if (time_zone == NULL)
		return session_timezone;
	tz = time_zone[0] ? pg_tzset(time_zone) : NULL;
	if (tz == NULL || !pg_tz_acceptable(tz))
		ereport(ERROR,
				(errcode(ERRCODE_BACKFILL_OPTION_INVALID),
				 name ? errmsg("window_time_zone of backfill \"%s\" is not a known time zone", name) :
				 errmsg("\"%s\" is not a known time zone", time_zone),
				 errdetail("It was given as \"%s\".", time_zone),
				 errhint(WINDOWS_HINT)));
	return tz;
}

Windows *
windows_parse(const char *name, ArrayType *windows, const char *time_zone)
{
	Windows    *result = palloc0(sizeof(Windows));
	Datum	   *elems;
	bool	   *nulls;
	int			n;

	result->tz = windows_time_zone(name, time_zone);
	if (windows == NULL)
		return result;
	if (ARR_NDIM(windows) > 1)
		refuse(name, NULL, "windows must be a list of one dimension");
	deconstruct_array(windows, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
	if (n == 0)
		refuse(name, NULL, "an empty list of windows would never let the backfill run");
	if (n > WINDOWS_MAX)
		refuse(name, NULL, psprintf("at most %d windows may be given", WINDOWS_MAX));
	for (int i = 0; i < n; i++)
	{
		if (nulls[i])
			refuse(name, NULL, "a window is NULL");
		parse_window(name, TextDatumGetCString(elems[i]), &result->w[i]);
	}
	result->n = n;
	return result;
}

/* t as the zone's local day (Julian) and minute of that day */
static void
local_day_minute(TimestampTz t, pg_tz *tz, int *julian, int *minute)
{
	struct pg_tm tm;
	fsec_t		fsec;
	int			tzoff;

	if (timestamp2tm(t, &tzoff, &tm, &fsec, NULL, tz) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("timestamp out of range")));
	*julian = date2j(tm.tm_year, tm.tm_mon, tm.tm_mday);
	*minute = tm.tm_hour * 60 + tm.tm_min;
}

/* the zone's local time minute of Julian day julian, as a timestamptz */
static TimestampTz
local_to_timestamptz(int julian, int minute, pg_tz *tz)
{
	struct pg_tm tm;
	TimestampTz result;
	int			tzoff;

	memset(&tm, 0, sizeof(tm));
	j2date(julian, &tm.tm_year, &tm.tm_mon, &tm.tm_mday);
	tm.tm_hour = minute / 60;
	tm.tm_min = minute % 60;
	tzoff = DetermineTimeZoneOffset(&tm, tz);
	if (tm2timestamp(&tm, 0, &tzoff, &result) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("timestamp out of range")));
	return result;
}

bool
windows_inside(const Windows *windows, TimestampTz t, TimestampTz *next_start)
{
	int			julian;
	int			minute;
	bool		inside = false;

	*next_start = 0;
	if (windows->n == 0)
		return true;
	/* a test's clock (backfill.windows_clock_offset), given back in next_start */
	t += (TimestampTz) backfill_windows_clock_offset * USECS_PER_SEC;
	local_day_minute(t, windows->tz, &julian, &minute);
	for (int i = 0; i < windows->n; i++)
	{
		const Window *w = &windows->w[i];

		/* a window of today, or one of yesterday that runs past midnight */
		for (int back = 0; back <= 1; back++)
		{
			int			at = minute + back * 24 * 60;

			if ((w->days & (1 << j2day(julian - back))) &&
				at >= w->start_min && at < w->start_min + w->length_min)
				inside = true;
		}
		/* its next start: within 8 days, the first after t */
		for (int ahead = 0; ahead <= 8; ahead++)
		{
			TimestampTz start;

			if (!(w->days & (1 << j2day(julian + ahead))))
				continue;
			start = local_to_timestamptz(julian + ahead, w->start_min, windows->tz);
			if (start > t)
			{
				start -= (TimestampTz) backfill_windows_clock_offset * USECS_PER_SEC;
				if (*next_start == 0 || start < *next_start)
					*next_start = start;
				break;
			}
		}
	}
	return inside;
}

/*
 * backfill.window_at(windows text[], time_zone text, at timestamptz,
 * OUT inside boolean, OUT next_start timestamptz): whether at is inside
 * one of the windows, and the next start after it.  Refuses what
 * backfill_declare refuses.  NULL windows: inside, no next start; NULL
 * time_zone: the session's TimeZone; NULL at: now.
 */
Datum
backfill_window_at(PG_FUNCTION_ARGS)
{
	ArrayType  *arr = PG_ARGISNULL(0) ? NULL : PG_GETARG_ARRAYTYPE_P(0);
	char	   *zone = PG_ARGISNULL(1) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(1));
	TimestampTz at = PG_ARGISNULL(2) ? GetCurrentTransactionStartTimestamp() :
		PG_GETARG_TIMESTAMPTZ(2);
	Windows    *windows = windows_parse(NULL, arr, zone);
	TimestampTz next;
	TupleDesc	desc;
	Datum		values[2];
	bool		nulls[2] = {false, false};

	check_catalog_current(NULL, NULL);
	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "backfill.window_at must return a record");
	values[0] = BoolGetDatum(windows_inside(windows, at, &next));
	values[1] = TimestampTzGetDatum(next);
	nulls[1] = (next == 0);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc), values, nulls)));
}
