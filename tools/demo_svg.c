/*
 * The demo's timeline: one request in every mode, on one time axis from
 * the request's arrival at P. Per mode, a P row (waiting for D's transfer
 * info and the GPU, then one bar per layer's compute; its KV step is
 * recorded part way in) and a D row (one bar per layer group: from
 * when the group was ready at P, or the previous group landed, to when D
 * saw it landed). D learns landings from its own count of what landed
 * (lc_receiver_layers_ready, polled every DEMO_POLL_US); landings seen
 * together share their interval evenly. Hand-written SVG 1.1.
 */
#include <math.h>
#include <stdio.h>

#include "demo.h"

#define W 1000.0
#define LEFT 150.0
#define RIGHT 30.0
#define TOP 64.0
#define PANEL 92.0
#define BAR 16.0

static double xpos(double t_ms, double tmax)
{
	return LEFT + (W - LEFT - RIGHT) * (t_ms < 0 ? 0 : t_ms) / tmax;
}

static double rel(uint64_t t, uint64_t t0)
{
	return t >= t0 ? (double)(t - t0) / 1e6 : 0;
}

static void rect(FILE *f, double x0, double x1, double y, double h, const char *fill,
		 const char *title)
{
	double w = x1 - x0;
	fprintf(f,
		"<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\">"
		"<title>%s</title></rect>\n",
		x0, y, w < 0.6 ? 0.6 : w, h, fill, title);
}

static double nice_step(double range)
{
	double raw = range / 8, p = pow(10, floor(log10(raw)));
	double m = raw / p;
	return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

static void panel(FILE *f, const demo_opts_t *o, const demo_svg_row_t *r, double y, double tmax)
{
	const demo_room_rec_t *p = r->p, *d = r->d;
	uint32_t L = o->layers_total;
	uint64_t t0 = p->t_arrive;
	char title[160];
	double ttft = rel(d->t_final, t0), last = rel(p->t_layer_end[L - 1], t0);
	fprintf(f, "<text x=\"10\" y=\"%.1f\" font-weight=\"bold\">%s</text>\n", y + 14, r->name);
	fprintf(f,
		"<text x=\"10\" y=\"%.1f\" font-size=\"11\" fill=\"#555\">first token %.1f ms"
		"</text>\n",
		y + 30, ttft);
	fprintf(f, "<text x=\"10\" y=\"%.1f\" font-size=\"11\" fill=\"#555\">tail %.2f ms</text>\n",
		y + 44, ttft - last);
	double yp = y + 6, yd = y + 6 + BAR + 12;
	fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">P</text>\n",
		LEFT - 6, yp + 12);
	fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">D</text>\n",
		LEFT - 6, yd + 12);
	snprintf(title, sizeof title, "waiting for D's transfer info and the GPU: %.2f ms",
		 rel(p->t_start, t0));
	rect(f, xpos(0, tmax), xpos(rel(p->t_start, t0), tmax), yp, BAR, "#d0d0d0", title);
	for (uint32_t l = 0; l < L; l++) {
		double a = rel(l ? p->t_layer_end[l - 1] : p->t_start, t0);
		double b = rel(p->t_layer_end[l], t0), k = rel(p->t_layer[l], t0);
		bool draft = l >= o->model->layers;
		snprintf(title, sizeof title, "%slayer %u: %.2f-%.2f ms, KV written at %.2f ms",
			 draft ? "draft " : "", l, a, b, k);
		rect(f, xpos(a, tmax), xpos(b, tmax), yp, BAR,
		     draft ? (l & 1 ? "#f28e2b" : "#ffbe7d") : (l & 1 ? "#4e79a7" : "#7fa6d3"),
		     title);
	}
	/* Groups [k*I, min((k+1)*I, L)), or one group of all layers. */
	uint32_t I = r->interval <= 0 ? L : (uint32_t)r->interval;
	uint32_t groups = (L + I - 1) / I;
	double prev_end = 0;
	for (uint32_t k = 0; k < groups;) {
		uint32_t last_k = (k + 1) * I < L ? (k + 1) * I - 1 : L - 1;
		uint64_t landed = d->t_layer[last_k];
		uint32_t k2 = k; /* groups that landed together with k */
		while (k2 + 1 < groups) {
			uint32_t e = (k2 + 2) * I < L ? (k2 + 2) * I - 1 : L - 1;
			if (d->t_layer[e] != landed)
				break;
			k2++;
		}
		double s = rel(p->t_layer[last_k], t0), e = rel(landed, t0);
		if (s < prev_end)
			s = prev_end;
		if (e < s)
			e = s;
		double step = (e - s) / (k2 - k + 1);
		for (uint32_t g = k; g <= k2; g++) {
			double a = s + step * (g - k), b = a + step;
			uint32_t first_l = g * I,
				 last_l = (g + 1) * I < L ? (g + 1) * I - 1 : L - 1;
			snprintf(title, sizeof title, "layers %u-%u landed at D by %.2f ms",
				 first_l, last_l, e);
			rect(f, xpos(a, tmax), xpos(b, tmax), yd, BAR,
			     g & 1 ? "#59a14f" : "#8cd17d", title);
		}
		prev_end = e;
		k = k2 + 1;
	}
	double xl = xpos(last, tmax), xt = xpos(ttft, tmax);
	fprintf(f,
		"<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"#333\" "
		"stroke-dasharray=\"3,2\"/>\n",
		xl, yp - 3, xl, yd + BAR + 3);
	fprintf(f,
		"<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"#d62728\" "
		"stroke-width=\"2\"/>\n",
		xt, yp - 3, xt, yd + BAR + 3);
	fprintf(f,
		"<text x=\"%.2f\" y=\"%.1f\" font-size=\"11\" fill=\"#d62728\" "
		"text-anchor=\"%s\">first token %.1f ms</text>\n",
		xt, yd + BAR + 15, xt > W - 150 ? "end" : "start", ttft);
}

int lc__demo_svg(const char *path, const demo_opts_t *o, const demo_svg_row_t *rows, int n)
{
	FILE *f = fopen(path, "w");
	if (!f)
		return -errno;
	double tmax = 1e-3;
	uint32_t L = o->layers_total;
	for (int i = 0; i < n; i++) {
		double t = rel(rows[i].d->t_final, rows[i].p->t_arrive);
		if (t > tmax)
			tmax = t;
	}
	tmax *= 1.04;
	double height = TOP + PANEL * n + 100;
	fprintf(f,
		"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
		"<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%.0f\" "
		"height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" font-family=\"DejaVu Sans, Arial, "
		"sans-serif\" font-size=\"12\">\n",
		W, height, W, height);
	fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
	fprintf(f,
		"<text x=\"10\" y=\"22\" font-size=\"15\" font-weight=\"bold\">layercake demo: "
		"one request of %llu tokens, %s, %u layers%s, over %s</text>\n",
		(unsigned long long)rows[0].p->tokens, o->model->name, L,
		o->draft_layers ? " (with draft)" : "", o->transport);
	if (o->layer_ms > 0)
		fprintf(f,
			"<text x=\"10\" y=\"40\" font-size=\"11\" fill=\"#555\">P computes each "
			"layer for %.3f ms (fixed); ",
			o->layer_ms);
	else
		fprintf(f,
			"<text x=\"10\" y=\"40\" font-size=\"11\" fill=\"#555\">P computes at a "
			"%.0f TFLOP/s roofline; ",
			o->tflops);
	fprintf(f,
		"D's landings are as D saw them (P's layers-landed messages, polled every "
		"%d us)</text>\n",
		DEMO_POLL_US);
	/* Axis and grid. */
	double step = nice_step(tmax), ybot = TOP + PANEL * n;
	for (double t = 0; t <= tmax; t += step) {
		double x = xpos(t, tmax);
		fprintf(f,
			"<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"#eee\"/>\n",
			x, TOP - 6, x, ybot);
		fprintf(f,
			"<text x=\"%.2f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\">"
			"%g</text>\n",
			x, ybot + 16, t);
	}
	fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>\n",
		LEFT, ybot, W - RIGHT, ybot);
	fprintf(f,
		"<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\">"
		"ms since the request reached P</text>\n",
		(LEFT + W - RIGHT) / 2, ybot + 32);
	for (int i = 0; i < n; i++)
		panel(f, o, &rows[i], TOP + PANEL * i, tmax);
	/* Legend. */
	static const struct {
		const char *fill, *text;
	} legend[] = {
		{"#d0d0d0", "waiting (transfer info, GPU)"},
		{"#4e79a7", "P: layer compute"},
		{"#ffbe7d", "P: draft layer"},
		{"#59a14f", "D: layer group landed"},
		{"#d62728", "D: first token (Success)"},
	};
	double lx = 10, ly = ybot + 52;
	for (size_t i = 0; i < sizeof legend / sizeof legend[0]; i++) {
		if (i == 2 && !o->draft_layers)
			continue;
		fprintf(f,
			"<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"10\" fill=\"%s\"/>"
			"<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">%s</text>\n",
			lx, ly, legend[i].fill, lx + 18, ly + 9, legend[i].text);
		lx += 200;
	}
	fprintf(f,
		"<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\" "
		"stroke-dasharray=\"3,2\"/><text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">"
		"last layer computed at P (the exposed tail runs from here to the first "
		"token)</text>\n",
		10.0, ly + 28, 24.0, ly + 28, 28.0, ly + 32);
	fprintf(f, "</svg>\n");
	int rc = ferror(f) ? -EIO : 0;
	if (fclose(f) && !rc)
		rc = -errno;
	return rc;
}
