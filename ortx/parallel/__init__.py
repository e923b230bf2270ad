"""Pipeline parallelism: `split` a model into stage models, `run` micro-batches through them in processes joined
by shared memory or on Dask workers. Public as ortx.pipeline.split / ortx.pipeline.run."""
from ortx.parallel.plan import PipelinePlan
from ortx.parallel.run import run
from ortx.parallel.split import split

__all__ = ["PipelinePlan", "run", "split"]
