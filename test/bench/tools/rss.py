#!/usr/bin/env python3
"""rss.py [--cold] [--wait S] [--nm NMFILE] BIN ARGS...: run BIN ARGS, read
/proc/<pid>/status at S seconds, and attribute the binary's resident pages
(pagemap present bit) to ELF sections and, with --nm, to Go packages."""
import os, sys, time, subprocess, struct, shutil, collections, re, signal
args = sys.argv[1:]
cold = False; wait = 30; nm = None; top = 25
while args and args[0].startswith('--'):
    a = args.pop(0)
    if a == '--cold': cold = True
    elif a == '--wait': wait = float(args.pop(0))
    elif a == '--nm': nm = args.pop(0)
    elif a == '--top': top = int(args.pop(0))
binpath = os.path.abspath(args[0])
if cold:
    fd = os.open(binpath, os.O_RDONLY); os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)
p = subprocess.Popen([binpath] + args[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
time.sleep(wait)
st = {}
for line in open(f'/proc/{p.pid}/status'):
    k, _, v = line.partition(':')
    if k in ('VmHWM', 'VmRSS', 'RssAnon', 'RssFile', 'RssShmem'):
        st[k] = int(v.split()[0]) / 1024
print('status MiB: ' + ', '.join(f'{k} {v:.1f}' for k, v in st.items()))
# resident pages of the binary's mappings
maps = []
for line in open(f'/proc/{p.pid}/maps'):
    f = line.split()
    if len(f) >= 6 and f[5] == binpath:
        lo, hi = (int(x, 16) for x in f[0].split('-'))
        maps.append((lo, hi, f[1]))
pm = open(f'/proc/{p.pid}/pagemap', 'rb')
res = []
for lo, hi, perm in maps:
    pm.seek(lo // 4096 * 8)
    data = pm.read((hi - lo) // 4096 * 8)
    for i in range(len(data) // 8):
        e = struct.unpack_from('<Q', data, i * 8)[0]
        if e >> 63 & 1:
            res.append(lo + i * 4096)
print(f'binary pages resident: {len(res)*4/1024:.1f} MiB of {sum(h-l for l,h,_ in maps)/2**20:.1f} MiB mapped')
# sections
out = subprocess.run(['readelf', '-SW', binpath], capture_output=True, text=True).stdout
secs = []
for m in re.finditer(r'\]\s+(\S+)\s+\S+\s+([0-9a-f]+)\s+[0-9a-f]+\s+([0-9a-f]+)', out):
    name, addr, size = m.group(1), int(m.group(2), 16), int(m.group(3), 16)
    if addr: secs.append((addr, addr + size, name))
bysec = collections.Counter()
for a in res:
    n = [s for lo, hi, s in secs if lo <= a < hi or lo <= a + 4095 < hi]
    bysec[n[0] if n else '?'] += 1
print('by section (MiB resident / size):')
for lo, hi, s in secs:
    if bysec[s]: print(f'  {s:14s} {bysec[s]*4/1024:6.1f} / {(hi-lo)/2**20:6.1f}')
if nm:
    syms = []
    for line in open(nm):
        f = line.split(None, 3)
        if len(f) == 4 and f[2] in 'TtRrDdBb':
            syms.append((int(f[0], 16), int(f[1]), f[3].strip()))
    syms.sort()
    import bisect
    starts = [s[0] for s in syms]
    def pkg(name):
        name = re.sub(r'^(type:|go:itab\.\*?|go:)', '', name)
        i = name.rfind('/')
        j = name.find('.', i + 1)
        return name[:j] if j > 0 else name
    bypkg = collections.Counter()
    for a in res:
        # bytes of each package's symbols on this page
        i = bisect.bisect_right(starts, a) - 1
        i = max(i, 0)
        cover = collections.Counter()
        while i < len(syms) and syms[i][0] < a + 4096:
            s0, sz, name = syms[i]
            o = min(s0 + max(sz, 1), a + 4096) - max(s0, a)
            if o > 0: cover[pkg(name)] += o
            i += 1
        tot = sum(cover.values())
        if tot == 0: bypkg['(no symbol: pclntab, …)'] += 1; continue
        for k, v in cover.items(): bypkg[k] += v / tot
    print('by package (MiB resident of text/rodata/data with symbols):')
    for k, v in bypkg.most_common(top):
        print(f'  {v*4/1024:6.2f}  {k}')
p.send_signal(signal.SIGINT); p.wait()
