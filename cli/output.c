/*
 * output.c: what the client prints for a terminal: aligned tables with
 * upper-case headers (numbers right-aligned, NULL as '-'), counts with
 * thousands separators, short durations and progress bars.
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* display width of UTF-8 text (code points; good enough for names) */
static int
text_width(const char *s)
{
	int			w = 0;

	for (; *s; s++)
		if ((*s & 0xC0) != 0x80)
			w++;
	return w;
}

static bool
is_numeric_type(Oid t)
{
	return t == INT2OID || t == INT4OID || t == INT8OID || t == FLOAT4OID ||
		t == FLOAT8OID || t == NUMERICOID;
}

static const char *
cell(const PGresult *res, int r, int c)
{
	if (PQgetisnull(res, r, c))
		return "-";
	if (PQftype(res, c) == BOOLOID)
		return strcmp(PQgetvalue(res, r, c), "t") == 0 ? "yes" : "no";
	return PQgetvalue(res, r, c);
}

/* An aligned table: upper-case headers, numbers right-aligned, NULL as '-'. */
void
print_table(const PGresult *res)
{
	int			nf = PQnfields(res);
	int			nt = PQntuples(res);
	int		   *width = xmalloc(sizeof(int) * (nf > 0 ? nf : 1));

	for (int c = 0; c < nf; c++)
	{
		width[c] = text_width(PQfname(res, c));
		for (int r = 0; r < nt; r++)
		{
			int			w = text_width(cell(res, r, c));

			if (w > width[c])
				width[c] = w;
		}
	}
	for (int r = -1; r < nt; r++)
	{
		for (int c = 0; c < nf; c++)
		{
			const char *v;
			int			pad;
			bool		last = (c == nf - 1);

			if (r < 0)
			{
				v = PQfname(res, c);
				pad = width[c] - text_width(v);
				for (const char *p = v; *p; p++)
					putchar(*p >= 'a' && *p <= 'z' ? *p - 'a' + 'A' : (*p == '_' ? ' ' : *p));
				if (!last)
					printf("%*s", pad + 2, "");
				continue;
			}
			v = cell(res, r, c);
			pad = width[c] - text_width(v);
			if (is_numeric_type(PQftype(res, c)))
				printf("%*s%s", pad, "", v);
			else
			{
				fputs(v, stdout);
				if (!last)
					printf("%*s", pad, "");
			}
			if (!last)
				fputs("  ", stdout);
		}
		putchar('\n');
	}
	free(width);
}

/* an integer with thousands separators: 1234567 -> 1,234,567 */
void
fmt_count(char *buf, size_t len, double v)
{
	char		digits[32];
	int			n,
				o = 0;
	long long	x = (long long) (v + (v >= 0 ? 0.5 : -0.5));

	snprintf(digits, sizeof(digits), "%lld", x < 0 ? -x : x);
	n = strlen(digits);
	if (x < 0 && (size_t) o + 1 < len)
		buf[o++] = '-';
	for (int i = 0; i < n && (size_t) o + 1 < len; i++)
	{
		if (i > 0 && (n - i) % 3 == 0 && (size_t) o + 2 < len)
			buf[o++] = ',';
		buf[o++] = digits[i];
	}
	buf[o] = '\0';
}

/* a duration: 5s, 2m05s, 1h02m */
void
fmt_duration(char *buf, size_t len, double secs)
{
	long		s = (long) (secs + 0.5);

	if (secs < 0)
		s = 0;
	if (s < 60)
		snprintf(buf, len, "%lds", s);
	else if (s < 3600)
		snprintf(buf, len, "%ldm%02lds", s / 60, s % 60);
	else
		snprintf(buf, len, "%ldh%02ldm", s / 3600, (s % 3600) / 60);
}

/* a progress bar of BAR_WIDTH cells, [#####-----]; progress < 0 is unknown */
void
fmt_bar(char *buf, size_t len, double progress)
{
	int			filled = 0;

	if (len < BAR_WIDTH + 3)
	{
		buf[0] = '\0';
		return;
	}
	if (progress >= 0)
	{
		filled = (int) (progress * BAR_WIDTH + 0.5);
		if (filled > BAR_WIDTH)
			filled = BAR_WIDTH;
	}
	buf[0] = '[';
	for (int i = 0; i < BAR_WIDTH; i++)
		buf[i + 1] = i < filled ? '#' : '-';
	buf[BAR_WIDTH + 1] = ']';
	buf[BAR_WIDTH + 2] = '\0';
}
