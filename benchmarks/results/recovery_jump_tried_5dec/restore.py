import json,sys,glob,os
# seconds from the end of the slow window (second slowdown_changed of the straggler) to the first resize that gives it >= 3/4 of the even share
for d in sorted(glob.glob(sys.argv[1]+'/*_s*')):
    if not os.path.isdir(d): continue
    ev=[json.loads(l) for l in open(d+'/events.jsonl')]
    sl=[e for e in ev if e['kind']=='slowdown_changed']
    if len(sl)<2: print(d,'no end'); continue
    end=sl[1]['t']; w=str(sl[1]['worker'])
    tgt=[e['t'] for e in ev if e['kind']=='target_reached']
    share=None
    for e in ev:
        if e['kind']=='batch_sizes' and e['t']>=end:
            sizes=e['sizes']; even=sum(sizes.values())/len(sizes)
            if sizes.get(w,0)>=0.75*even: share=e['t']; break
    print(os.path.basename(d), 'window end', round(end,2), 'restored after', None if share is None else round(share-end,2), 'target after', round(tgt[0]-end,2) if tgt else None)
