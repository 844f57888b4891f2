"""What the framework callbacks share: their class is made on first use, over the framework's
own base class, so that importing perf_lessons never imports a framework."""


def lazy_callback(module_name, logic, load_base, doc):
    """A module `__getattr__` that makes `ReportCallback` from `logic` and the class
    `load_base()` imports, once (the classes made are in its `made`)."""
    made = {}

    def __getattr__(name):
        if name != "ReportCallback":
            raise AttributeError("module %r has no attribute %r" % (module_name, name))
        if name not in made:
            made[name] = type(name, (logic, load_base()), {"__module__": module_name,
                                                            "__doc__": doc})
        return made[name]

    __getattr__.made = made
    return __getattr__
