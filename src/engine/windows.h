/*-------------------------------------------------------------------------
 *
 * windows.h
 *	  A declaration's time windows ("Mon-Fri 22:00-06:00", "Sat-Sun") in
 *	  its time zone: parsed, and asked whether a time is inside one and
 *	  when the next one starts (windows.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef BACKFILL_WINDOWS_H
#define BACKFILL_WINDOWS_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "pgtime.h"
#include "utils/array.h"

#define WINDOWS_MAX		64

/* one window: on the days of the mask (bit 0 Sunday .. 6 Saturday), from start */
typedef struct Window
{
	uint8		days;
	int			start_min;		/* minutes after local midnight, 0..1439 */
	int			length_min;		/* 1..1440; past midnight: it belongs to its start's day */
} Window;

typedef struct Windows
{
	int			n;				/* 0: no windows, always inside */
	Window		w[WINDOWS_MAX];
	pg_tz	   *tz;
} Windows;

/* the accepted form, the hint of every refusal */
#define WINDOWS_HINT \
	"Write each window as days and/or a time range, such as \"Mon-Fri 22:00-06:00\", " \
	"\"Sat-Sun\" or \"09:00-17:00\": days are Mon, Tue, Wed, Thu, Fri, Sat, Sun, a range " \
	"(Fri-Mon) or a list (Mon,Wed,Fri); times are HH:MM-HH:MM, 24:00 may end one, and one " \
	"that ends before it starts runs past midnight and belongs to the day it starts.  " \
	"window_time_zone names a time zone of pg_timezone_names, such as 'Europe/Berlin'."

/*
 * Parse windows (text[], NULL: none) in time_zone (NULL: the session's
 * TimeZone).  Bad syntax, an empty window, an empty list or an unknown
 * time zone: BF011 naming backfill name (NULL: none) with WINDOWS_HINT.
 */
extern Windows *windows_parse(const char *name, ArrayType *windows, const char *time_zone);

/* the time zone a declaration names, checked (BF011 when unknown) */
extern pg_tz *windows_time_zone(const char *name, const char *time_zone);

/*
 * Is t inside a window?  *next_start: the first start of a window after t
 * (0 when there are no windows).
 */
extern bool windows_inside(const Windows *windows, TimestampTz t, TimestampTz *next_start);

#endif							/* BACKFILL_WINDOWS_H */
