"""result.json's content, from what the coordinator saw (read from its state, no I/O)."""

from __future__ import annotations

from star.tta import EvalPoint
from star.shm import transport_in_use


def result_dict(coordinator, points: list[EvalPoint], stats: list) -> dict:
    """The job's result: outcome, PS counters, policy activity and faults (`coordinator`: a star.coordinator.Coordinator)."""
    config, service, events = coordinator.config, coordinator.service, coordinator.events
    return {
        "task": config.task,
        "mode": config.plan.mode,
        "workers": config.workers,
        "ps": len(config.ps_addresses),
        "metric": coordinator.task.metric_name,
        "target": coordinator.target,
        "reached": service.tta_s is not None,
        "tta_s": service.tta_s,
        "updates_to_target": service.updates_to_target,  # TTA = updates_to_target x s_per_update
        "s_per_update": service.tta_s / service.updates_to_target if service.tta_s and service.updates_to_target else None,
        "final_metric": points[-1].metric if points else None,
        "best_metric": (max if coordinator.task.higher_is_better else min)(p.metric for p in points) if points else None,
        "iterations": service.cluster.max_iteration(),
        "updates": max((s.version for s in stats), default=0),
        "train_s": points[-1].time_s if points else 0.0,
        "reason": service.reason,
        "evaluations": len(points),
        "ps_stats": [
            {
                "ps_index": s.ps_index,
                "version": s.version,
                "accepted": s.accepted,
                "applied": s.applied,
                "dropped": s.dropped,
                "pending": s.pending,
                "counters": dict(sorted(s.counters.items())),
                "staleness": {str(k): v for k, v in sorted(s.staleness.items())},
                "pushes_received": s.pushes_received,
                "push_bytes_received": s.push_bytes_received,
            }
            for s in stats
        ],
        "reports_ignored": dict(service.cluster.ignored),
        **dict(zip(("transport", "wire"), transport_in_use(stats))),
        **service.cluster.compute_vs_comm(),
        "straggler_detections": events.counts.get("straggler_detected", 0),
        "plan_switches": events.counts.get("plan", 0) - 1,
        "amp_toggles": events.counts.get("amp", 0),
        "batch_resizes": events.counts.get("batch_sizes", 0),
        "final_plan": service.plan.describe() if service.plan else "",
        "faults": {
            "workers_lost": events.counts.get("worker_lost", 0),
            "workers_restarted": events.counts.get("worker_restarted", 0),
            "workers_rejoined": events.counts.get("worker_rejoined", 0),
            "ps_restored": events.counts.get("ps_restored", 0),
            "updates_lost": coordinator.ps_watch.updates_lost,
        },
    }
