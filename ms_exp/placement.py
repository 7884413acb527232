"""The ``placement`` group: where parameters and optimizer state live.

``device`` keeps everything on the training device, which needs no change to the network
or optimizer; it is described in the log so the run says where its tables were.
"""


def describe_placement(placement_cfg, device_target: str) -> str:
    if placement_cfg.mode == "device":
        return f"placement=device: every parameter and optimizer state on {device_target}"
    raise ValueError(f"placement.mode={placement_cfg.mode!r}: not supported by this build")
