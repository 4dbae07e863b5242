"""The hierarchy canvas: one level of the component tree at a time, drawn with level of detail."""

from tilewright.studio.ui.canvas.widget import CanvasWidget

__all__ = ["CanvasWidget"]
