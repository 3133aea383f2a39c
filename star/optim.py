"""Build the torch.optim optimizer a parameter server runs over its shard."""

from __future__ import annotations

import torch

from star.config import ConfigError, OptimizerConfig


def build_optimizer(config: OptimizerConfig, param) -> torch.optim.Optimizer:
    """A real torch optimizer over one flat shard parameter, or a model's parameters (config must be resolved)."""
    params = [param] if isinstance(param, torch.Tensor) else list(param)
    if config.name is None or config.lr is None:
        raise ConfigError("optimizer", config, "name and lr must be resolved before building")
    if config.name == "sgd":
        return torch.optim.SGD(
            params,
            lr=config.lr,
            momentum=config.momentum or 0.0,
            nesterov=config.nesterov,
            weight_decay=config.weight_decay,
        )
    betas = (config.beta1, config.beta2)
    if config.name == "adam":
        return torch.optim.Adam(params, lr=config.lr, betas=betas, eps=config.eps, weight_decay=config.weight_decay)
    if config.name == "adamw":
        return torch.optim.AdamW(params, lr=config.lr, betas=betas, eps=config.eps, weight_decay=config.weight_decay)
    raise ConfigError("optimizer.name", config.name, "one of sgd, adam, adamw")
