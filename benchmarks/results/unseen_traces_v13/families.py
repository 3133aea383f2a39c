import csv, statistics as st, sys
new={r['case']:r for r in csv.DictReader(open(sys.argv[1]))}
old={r['case']:r for r in csv.DictReader(open('benchmarks/results/unseen_traces_v11/summary.csv'))}
same=sum(1 for k in old if k in new and all(old[k][c]==new[k][c] for c in old[k]))
print('old cases',len(old),'identical in new',same)
fams={}
for k,r in new.items():
    if k in old: continue
    fams.setdefault(k.rsplit(' s',1)[0],[]).append(r)
for fam,rows in fams.items():
    ab=[float(r['auto_over_best']) for r in rows]
    mit=[float(r['mitigation']) for r in rows if r['mitigation'] not in ('','nan')]
    dl=[float(r['ssgd_delay']) for r in rows]
    best=[r['best_fixed'] for r in rows]
    m = f"n={len(mit)} median {st.median(mit):.2f} ({min(mit):.2f}-{max(mit):.2f})" if mit else "n=0"
    print(f"| {fam} | {len(rows)} | {st.median(ab):.3f} | {max(ab):.3f} | {min(dl):.2f}-{max(dl):.2f} | {m} | {', '.join(f'{b} {best.count(b)}' for b in sorted(set(best)))} |")
