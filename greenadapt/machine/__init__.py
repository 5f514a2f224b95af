"""The machine a command runs on: usable cores (``cores``), devices (``devices``), energy and CO₂ (``energy``)."""
