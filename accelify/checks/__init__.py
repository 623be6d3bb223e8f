"""Scripts bundled with accelify and launched by its commands (``accelify test``)."""

from pathlib import Path

CHECK_SCRIPT = Path(__file__).with_name("check_script.py")
