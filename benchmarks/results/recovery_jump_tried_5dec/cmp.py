import csv,sys,statistics as st
a={r['case']:r for r in csv.DictReader(open(sys.argv[1]))}
b={r['case']:r for r in csv.DictReader(open(sys.argv[2]))}
ch=[];
for k in a:
    for col in ('auto_s','batch_s'):
        x,y=float(a[k][col]),float(b[k][col])
        if abs(x-y)>1e-9: ch.append((k,col,x,y,y/x))
for col in ('auto_s','batch_s'):
    c=[t for t in ch if t[1]==col]
    print(col,'changed',len(c),'faster',sum(t[4]<1 for t in c),'slower',sum(t[4]>1 for t in c))
    for t in sorted(c,key=lambda t:t[4]): print('  ',t[0],t[2],'->',t[3],round(t[4],3))
def mit(d):
    m=[float(r['mitigation']) for r in d.values() if r['mitigation']]
    return st.median(m), sum(x>=0.85 for x in m), len(m)
print('mitigation median, >=0.85, n', mit(a), mit(b))
print('auto/best median', st.median(float(r['auto_over_best']) for r in a.values()), st.median(float(r['auto_over_best']) for r in b.values()))
