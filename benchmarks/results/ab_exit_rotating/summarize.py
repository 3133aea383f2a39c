import csv,glob,sys,statistics,os
root=sys.argv[1]
rows={}
for p in glob.glob(f'{root}/*_s*/runs.csv'):
    v,s=os.path.basename(os.path.dirname(p)).split('_s')
    for r in csv.DictReader(open(p)):
        rows[(v,int(s),r['run'])]=r
seeds=sorted({k[1] for k in rows})
for s in seeds:
    line=f"seed {s}:"
    for v in ('old','new'):
        a=rows.get((v,s,'auto')); c=rows.get((v,s,'clean'))
        if a and c: line+=f" {v} auto {float(a['tta_s']):6.2f} ({a['updates_to_target']} upd, {a['amp_toggles']} amp, {a['batch_resizes']} rs) clean {float(c['tta_s']):6.2f} |"
    print(line)
for v in ('old','new'):
    A=[float(rows[(v,s,'auto')]['tta_s']) for s in seeds if (v,s,'auto') in rows]
    C=[float(rows[(v,s,'clean')]['tta_s']) for s in seeds if (v,s,'clean') in rows]
    AC=[float(rows[(v,s,'auto-clean')]['tta_s']) for s in seeds if (v,s,'auto-clean') in rows]
    print(v, 'auto median', round(statistics.median(A),2), 'clean median', round(statistics.median(C),2), 'auto-clean', round(statistics.median(AC),2) if AC else None, len(A))
