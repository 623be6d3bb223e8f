"""A TensorBoard-style logger class (pytorch-beginner's `logger.py` wraps `tf.summary.FileWriter`): one log file."""
import os


class Logger(object):

    def __init__(self, log_dir):
        """Create a summary writer logging to log_dir."""
        os.makedirs(log_dir, exist_ok=True)
        self.writer = open(os.path.join(log_dir, "events.txt"), "a")

    def scalar_summary(self, tag, value, step):
        """Log a scalar variable."""
        self.writer.write(f"{tag} {step} {value:.6f}\n")
        self.writer.flush()

    def histo_summary(self, tag, values, step):
        """Log a histogram of the tensor of values."""
        self.writer.write(f"{tag} {step} mean={float(values.mean()):.6f}\n")
        self.writer.flush()
