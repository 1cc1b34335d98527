#!/usr/bin/env python3
"""The HTML report in a real browser (ctest Html.Browser, docs/report.md).

Writes the reports of predict, simulate, tune and gpus with build/mist, loads each one in headless
Chromium and checks that
  - the console stays empty (a page with a script error, loaded first, must show one: the check
    can fail);
  - the DOM Chromium built has the expected charts and marks (memory bars, timeline blocks,
    candidates with the chosen plan and the frontier, the GPUs' Pareto set) and nothing that loads
    from elsewhere (no src or href);
  - the screenshot of each page and of each chart alone is not blank: many colours, the chart's own
    fills among them (a bar segment, a forward block, a frontier point, the chosen diamond).
Exits 77 (ctest SKIP_RETURN_CODE) with a message when Chromium is not installed.

  browser_test.py --mist build/mist --source . [--screenshots docs/img]
--screenshots also writes one PNG per chart there (the pictures of docs/report.md).
Standard library only: the PNGs are decoded with zlib.
"""

import argparse
import html.parser
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

SKIP = 77


def fail(message):
    print("FAIL: " + message)
    sys.exit(1)


# --- PNG ---------------------------------------------------------------------------------------

def png_pixels(path):
    """(width, height, channels, rows as bytes) of an 8-bit RGB or RGBA, non-interlaced PNG."""
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        fail(f"{path}: not a PNG")
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
            if depth != 8 or color not in (2, 6) or interlace:
                fail(f"{path}: unexpected PNG format (depth {depth}, colour type {color})")
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    mask7 = int.from_bytes(b"\x7f" * stride, "big")
    mask8 = int.from_bytes(b"\x80" * stride, "big")
    rows, prev = [], bytes(stride)
    for y in range(height):
        start = y * (stride + 1)
        f, line = raw[start], raw[start + 1:start + 1 + stride]
        if f == 2:  # Up, the common filter: a byte-wise sum without carries, on the row as one integer
            a, b = int.from_bytes(line, "big"), int.from_bytes(prev, "big")
            line = (((a & mask7) + (b & mask7)) ^ ((a ^ b) & mask8)).to_bytes(stride, "big")
        elif f != 0:
            line = bytearray(line)
            for i in range(stride):
                a = line[i - channels] if i >= channels else 0
                b = prev[i]
                c = prev[i - channels] if i >= channels else 0
                if f == 1:
                    line[i] = (line[i] + a) & 255
                elif f == 3:
                    line[i] = (line[i] + (a + b) // 2) & 255
                elif f == 4:
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
            line = bytes(line)
        rows.append(line)
        prev = line
    return width, height, channels, rows


def hex_rgb(h):
    return bytes(int(h[i:i + 2], 16) for i in (1, 3, 5))


def check_not_blank(path, must_have=()):
    width, height, channels, rows = png_pixels(path)
    counts = {}
    for row in rows:
        for x in range(0, len(row), channels):
            px = row[x:x + 3]
            counts[px] = counts.get(px, 0) + 1
    total = width * height
    background = max(counts.values())
    inked = total - background
    if len(counts) < 8 or inked < total * 0.02:
        fail(f"{path}: blank screenshot ({len(counts)} colours, {100 * inked / total:.1f}% not background)")
    for colour in must_have:
        if counts.get(hex_rgb(colour), 0) < 10:
            fail(f"{path}: the chart's fill {colour} is not drawn")
    return len(counts), inked / total


# --- Chromium ----------------------------------------------------------------------------------

def find_chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Browser:
    def __init__(self, exe, tmp):
        self.exe, self.tmp, self.runs = exe, tmp, 0

    def run(self, url, *extra, size=(1200, 2000)):
        """Chromium's stdout and the console messages it logged while loading `url`."""
        self.runs += 1
        profile = os.path.join(self.tmp, f"profile-{self.runs}")
        cmd = [self.exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
               "--disable-extensions", "--enable-logging=stderr", "--v=0", f"--user-data-dir={profile}",
               f"--window-size={size[0]},{size[1]}", *extra, url]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=90)
        except subprocess.TimeoutExpired:
            fail(f"chromium did not finish loading {url} in 90 s")
        console = [line for line in p.stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]
        if p.returncode != 0:
            fail(f"chromium exited {p.returncode} on {url}:\n{p.stderr[-2000:]}")
        return p.stdout, console

    def screenshot(self, path, png, size):
        _, console = self.run("file://" + path, f"--screenshot={png}", size=size)
        if not os.path.exists(png):
            fail(f"chromium wrote no screenshot of {path}")
        return console


# --- The DOM -----------------------------------------------------------------------------------

class Dom(html.parser.HTMLParser):
    """Counts elements by tag and class, the ids, and any attribute that would fetch something."""

    def __init__(self):
        super().__init__()
        self.ids, self.classes, self.fetching = set(), {}, []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        for c in (a.get("class") or "").split():
            self.classes[(tag, c)] = self.classes.get((tag, c), 0) + 1
        for name in ("src", "href", "srcset", "data", "xlink:href", "action"):
            if name in a:
                self.fetching.append(f"<{tag} {name}={a[name]}>")

    def count(self, tag, cls):
        return self.classes.get((tag, cls), 0)


def svg_of(page, svg_id):
    """The <svg id=svg_id> element of the page as written, and the page's style."""
    start = page.find(f'<svg id="{svg_id}"')
    if start < 0:
        fail(f"no <svg id={svg_id}>")
    end = page.find("</svg>", start) + len("</svg>")
    style = page[page.find("<style>"):page.find("</style>") + len("</style>")]
    return page[start:end], style


def svg_size(svg):
    m = re.search(r'width="([0-9.]+)" height="([0-9.]+)"', svg)
    return int(float(m.group(1))), int(float(m.group(2)))


# --- The reports -------------------------------------------------------------------------------

def write_reports(mist, source, tmp):
    ex = os.path.join(source, "examples")
    job = ["--model", "gpt3-13b", "--cluster", os.path.join(ex, "cluster_2x8_a100.json"),
           "--training", os.path.join(ex, "training_gpt.json")]
    plan = ["--plan", os.path.join(ex, "plan_gpt13b_2x8.json")]
    training = os.path.join(tmp, "training.json")
    with open(training, "w") as f:
        f.write('{"global_batch_size": 512, "seq_length": 2048, "precision": "bf16", "flash_attention": true}')
    commands = {
        "predict": ["predict", *job, *plan],
        "simulate": ["simulate", *job, "--plan", os.path.join(ex, "plan_gpt13b_zero3_offload.json")],
        "tune": ["tune", "--model", "llama2-7b", "--cluster", os.path.join(ex, "cluster_2x8_a100.json"),
                 "--training", training, "--top", "20"],
        "gpus": ["gpus", "--model", "gpt3-1.3b", "--training", training,
                 "--candidates", "A100-SXM4-40GB,H100-SXM5-80GB,L40S-48GB", "--gpus", "8,16,32"],
    }
    pages = {}
    for name, args in commands.items():
        out = os.path.join(tmp, name + ".html")
        p = subprocess.run([mist, *args, "--html", out], capture_output=True, text=True, timeout=300)
        if p.returncode != 0 or not os.path.exists(out):
            fail(f"mist {' '.join(args)} --html exited {p.returncode}: {p.stderr}")
        pages[name] = out
    return pages


# What each report's DOM must hold: (tag, class, at least) and the chart ids.
EXPECTED = {
    "predict": {"ids": ["summary", "memory", "timeline", "timeline-start", "memory-table"],
                "marks": [("rect", "bar", 10), ("line", "capacity", 1), ("rect", "block", 256),
                          ("rect", "forward", 128), ("rect", "backward", 128)]},
    "simulate": {"ids": ["summary", "memory", "timeline"],
                 "marks": [("rect", "bar", 10), ("rect", "block", 100), ("rect", "comm", 1)]},
    "tune": {"ids": ["summary", "memory", "timeline", "candidates", "top-plans", "frontier-plans"],
             "marks": [("circle", "point", 5), ("circle", "front", 2), ("path", "chosen", 1),
                       ("path", "front-line", 1), ("line", "capacity", 1), ("rect", "headroom", 1)]},
    "gpus": {"ids": ["summary", "gpus", "gpus-table"],
             "marks": [("circle", "point", 6), ("circle", "front", 2), ("path", "front-line", 1),
                       ("text", "point-label", 6)]},
}

# The fills each chart alone must show (report.cpp's style).
CHART_FILLS = {
    "memory": ["#4e79a7", "#f28e2b", "#e15759", "#59a14f"],
    "timeline": ["#4e79a7", "#f28e2b"],
    "timeline-start": ["#4e79a7", "#f28e2b"],
    "candidates": ["#e15759", "#f1ce63"],
    "gpus": ["#e15759"],
}
CHARTS = {"predict": ["memory", "timeline", "timeline-start"], "tune": ["candidates"], "gpus": ["gpus"]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mist", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--screenshots", help="write report-CHART.png of each chart into this folder")
    args = ap.parse_args()

    exe = find_chromium()
    if not exe:
        print("SKIP: Chromium is not installed (Debian: apt-get install chromium; scripts/install-deps.sh "
              "installs it); the report's charts are checked without a browser in mist_html_tests")
        return SKIP

    with tempfile.TemporaryDirectory(prefix="mist-browser-") as tmp:
        browser = Browser(exe, tmp)

        # The console check can fail: a page with a script error shows it.
        broken = os.path.join(tmp, "broken.html")
        with open(broken, "w") as f:
            f.write("<!DOCTYPE html><html><body><p>x</p><script>no_such_function();</script></body></html>")
        _, console = browser.run("file://" + broken, "--dump-dom")
        if not any("no_such_function" in line for line in console):
            fail("the console check saw nothing on a page with a script error: it cannot detect errors")

        pages = write_reports(args.mist, args.source, tmp)
        for name, path in pages.items():
            dom_text, console = browser.run("file://" + path, "--dump-dom")
            if console:
                fail(f"{name}: the console is not empty:\n" + "\n".join(console))
            dom = Dom()
            dom.feed(dom_text)
            for i in EXPECTED[name]["ids"]:
                if i not in dom.ids:
                    fail(f"{name}: no element with id {i} in the DOM Chromium built")
            for tag, cls, least in EXPECTED[name]["marks"]:
                n = dom.count(tag, cls)
                if n < least:
                    fail(f"{name}: {n} <{tag} class={cls}>, expected at least {least}")
            if dom.fetching:
                fail(f"{name}: the page loads from elsewhere: {dom.fetching[:3]}")

            png = os.path.join(tmp, name + ".png")
            console = browser.screenshot(path, png, (1100, 1600))
            if console:
                fail(f"{name}: the console is not empty:\n" + "\n".join(console))
            colours, inked = check_not_blank(png)
            print(f"{name}: {len(dom.ids)} ids, {colours} colours, {100 * inked:.0f}% inked")

            page = open(path, encoding="utf-8").read()
            for chart in CHARTS.get(name, []):
                svg, style = svg_of(page, chart)
                alone = os.path.join(tmp, f"{chart}-alone.html")
                with open(alone, "w", encoding="utf-8") as f:
                    f.write(f'<!DOCTYPE html><html><head><meta charset="utf-8">{style}'
                            "<style>body { margin: 0; padding: 0; max-width: none; }</style></head>"
                            f"<body>{svg}</body></html>")
                shot = os.path.join(args.screenshots or tmp, f"report-{chart}.png")
                if args.screenshots:
                    os.makedirs(args.screenshots, exist_ok=True)
                console = browser.screenshot(alone, shot, svg_size(svg))
                if console:
                    fail(f"{chart}: the console is not empty:\n" + "\n".join(console))
                colours, inked = check_not_blank(shot, CHART_FILLS[chart])
                print(f"  {chart}: {colours} colours, {100 * inked:.0f}% inked, its fills drawn")
        print(f"the report renders in {os.path.basename(exe)}: {browser.runs} page loads, no console message")
    return 0


if __name__ == "__main__":
    sys.exit(main())
