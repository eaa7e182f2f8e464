"""python -m gohccl.bench, or python path/to/gohccl/bench (the package's
folder): the second form loads the package from its folder under a name of
its own, without importing gohccl, so the bench runs (with --backends gloo)
where gohccl is not built; launch relaunches it the same way."""

if __package__:
    from .cli import main
    from .launch import exit_now
else:
    import importlib.util
    import os
    import sys

    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
    _spec = importlib.util.spec_from_file_location(
        "_gohccl_bench", os.path.join(_here, "__init__.py"), submodule_search_locations=[_here])
    _pkg = importlib.util.module_from_spec(_spec)
    sys.modules[_spec.name] = _pkg  # dataclasses look their module up by name
    _spec.loader.exec_module(_pkg)
    main, exit_now = _pkg.main, _pkg.exit_now

if __name__ == "__main__":
    exit_now(main())
