#!/usr/bin/env python3
"""Is a screenshot more than an empty page? Decodes an 8-bit RGB or RGBA PNG with the standard
library alone and prints one line: its size, the share of pixels that differ from the
background (the top-left pixel's colour) and the number of distinct colours. Exits 0 when at
least MIN_SHARE of the pixels differ and there are at least MIN_COLOURS colours, 1 otherwise,
2 when the file is not a PNG this reads.

usage: png_not_blank.py FILE.png
"""
import struct
import sys
import zlib

MIN_SHARE = 0.01
MIN_COLOURS = 16


def read_png(path):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG file")
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
    if header is None:
        raise ValueError("no IHDR chunk")
    width, height, depth, colour, _, _, interlace = header
    channels = {2: 3, 6: 4}.get(colour)
    if depth != 8 or channels is None or interlace != 0:
        raise ValueError(f"unsupported PNG (bit depth {depth}, colour type {colour}, interlace {interlace})")
    raw = zlib.decompress(idat)
    stride = width * channels
    rows, prev = [], bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b = prev[i]
            c = prev[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + a) & 255
            elif kind == 2:
                line[i] = (line[i] + b) & 255
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, channels, rows


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    try:
        width, height, channels, rows = read_png(sys.argv[1])
    except (OSError, ValueError, zlib.error) as e:
        print(f"{sys.argv[1]}: {e}", file=sys.stderr)
        return 2
    background = rows[0][:3]
    differ, colours = 0, set()
    for row in rows:
        for x in range(0, width * channels, channels):
            px = row[x:x + 3]
            colours.add(px)
            if px != background:
                differ += 1
    share = differ / (width * height)
    print(f"png: {width}x{height}, {100 * share:.1f}% of pixels not background, {len(colours)} colours")
    return 0 if share >= MIN_SHARE and len(colours) >= MIN_COLOURS else 1


if __name__ == "__main__":
    sys.exit(main())
