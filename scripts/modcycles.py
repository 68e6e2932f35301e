#!/usr/bin/env python3
"""Module import cycles inside each crate (issue 10: "no module-level import cycles").

    python3 scripts/modcycles.py [ROOT]      # exit 1 and a CYCLE line per cycle found

For every crate under ROOT/crates, builds the graph of `use crate::/super::/self::` paths
and inline `crate::...` paths between its modules (comments, `#[cfg(test)] mod` blocks and
tests.rs left out), merges each edge into the two sibling modules under the lowest common
ancestor (so `a::x -> b::y` is an edge a -> b), and prints the strongly connected
components. Uses through crate-root re-exports (`crate::Cq`) are not followed: a lower
bound, checked by test-all.sh.
"""
import os, re, sys, collections
root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
found = 0
def modpath(crate_src, f):
    rel = os.path.relpath(f, crate_src)[:-3].split(os.sep)
    if rel[-1] in ('lib','main') and len(rel)==1: return ()
    if rel[-1]=='mod': rel=rel[:-1]
    return tuple(rel)
def strip_comments(s):
    s = re.sub(r'/\*.*?\*/', '', s, flags=re.S)
    out=[]
    for line in s.split('\n'):
        i=line.find('//')
        # naive: ignore '//' inside strings rarely matters
        out.append(line if i<0 else line[:i])
    return '\n'.join(out)
def parse_tree(t):
    # returns list of paths (list of segments) from a use tree string
    t=t.strip()
    res=[]
    def split_top(s):
        parts=[];depth=0;cur=''
        for ch in s:
            if ch=='{': depth+=1
            if ch=='}': depth-=1
            if ch==',' and depth==0: parts.append(cur);cur=''
            else: cur+=ch
        if cur.strip(): parts.append(cur)
        return parts
    def rec(prefix, s):
        s=s.strip()
        if not s: return
        if s.startswith('{'):
            for p in split_top(s[1:s.rfind('}')]): rec(prefix,p)
            return
        m=re.match(r'([A-Za-z_][A-Za-z0-9_]*|\*)\s*(::\s*(.*))?$', s, re.S)
        if not m:
            m2=re.match(r'([A-Za-z_][A-Za-z0-9_]*)\s+as\s+\w+$', s)
            if m2: res.append(prefix+[m2.group(1)])
            return
        seg=m.group(1)
        if m.group(3) is not None: rec(prefix+[seg], m.group(3))
        else: res.append(prefix+[seg])
    rec([], t)
    return res
for crate in sorted(os.listdir(os.path.join(root,'crates'))):
    src=os.path.join(root,'crates',crate,'src')
    if not os.path.isdir(src): continue
    files=[]
    for d,_,fs in os.walk(src):
        for f in fs:
            if f.endswith('.rs'): files.append(os.path.join(d,f))
    mods={modpath(src,f):f for f in files}
    # bin-only files (main.rs crates) fine
    edges=collections.defaultdict(set)
    def resolve(cur, segs):
        # to absolute
        if not segs: return None
        if segs[0]=='crate': p=list(segs[1:])
        elif segs[0]=='super':
            base=list(cur)
            while segs and segs[0]=='super': base=base[:-1]; segs=segs[1:]
            p=base+list(segs)
        elif segs[0]=='self': p=list(cur)+list(segs[1:])
        else: return None
        # longest module prefix
        for k in range(len(p),-1,-1):
            if tuple(p[:k]) in mods: return tuple(p[:k])
        return ()
    for m,f in mods.items():
        s=strip_comments(open(f).read())
        mt=re.search(r'#\[cfg\(test\)\]\s*mod\s+\w+\s*\{', s)
        if mt: s=s[:mt.start()]
        if os.path.basename(f)=='tests.rs': continue
        paths=[]
        for u in re.finditer(r'\buse\s+([^;]*);', s, re.S):
            for p in parse_tree(u.group(1)): paths.append(p)
        for u in re.finditer(r'\b((?:crate|super|self)(?:\s*::\s*[A-Za-z_][A-Za-z0-9_]*)+)', s):
            paths.append(re.sub(r'\s','',u.group(1)).split('::'))
        for p in paths:
            t=resolve(m,p)
            if t is None or t==m: continue
            # LCA collapse
            k=0
            while k<min(len(m),len(t)) and m[k]==t[k]: k+=1
            if k==len(m) or k==len(t): continue  # ancestor/descendant
            a=m[:k+1]; b=t[:k+1]
            edges[(m[:k])].add((a,b,'/'.join(m)+'->'+'/'.join(t)))
    # SCC per scope
    for scope,es in edges.items():
        g=collections.defaultdict(set); why=collections.defaultdict(set)
        for a,b,w in es: g[a].add(b); why[(a,b)].add(w)
        nodes=set(g)|{b for v in g.values() for b in v}
        idx={};low={};st=[];on=set();out=[];c=[0]
        def sc(v):
            idx[v]=low[v]=c[0];c[0]+=1;st.append(v);on.add(v)
            for w in g[v]:
                if w not in idx: sc(w);low[v]=min(low[v],low[w])
                elif w in on: low[v]=min(low[v],idx[w])
            if low[v]==idx[v]:
                comp=[]
                while True:
                    w=st.pop();on.discard(w);comp.append(w)
                    if w==v: break
                if len(comp)>1: out.append(comp)
        for v in list(nodes):
            if v not in idx: sc(v)
        for comp in out:
            cs=set(comp)
            found += 1
            print(f"CYCLE {crate} in {'::'.join(scope) or 'crate root'}: {[ '::'.join(x) for x in comp]}")
            for a in comp:
                for b in g[a]:
                    if b in cs: print('    ', '::'.join(a),'->','::'.join(b),' via', sorted(why[(a,b)])[:4])
sys.exit(1 if found else 0)
