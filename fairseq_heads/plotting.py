"""matplotlib for files only (the Agg backend: no display where this runs), set up once."""
import logging


def pyplot():
    """matplotlib.pyplot with the Agg backend; matplotlib's own set-up logging kept quiet."""
    logging.getLogger("matplotlib").setLevel(logging.WARNING)  # it logs font lookups at DEBUG
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
