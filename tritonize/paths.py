"""Where the project's own files live (templates, bundled data)."""

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
TEMPLATES_DIR = PROJECT_ROOT / "templates"
DATA_DIR = Path(__file__).resolve().parent / "data"
