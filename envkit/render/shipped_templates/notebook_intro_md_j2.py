from jinja2.runtime import LoopContext, Macro, Markup, Namespace, TemplateNotFound, TemplateReference, TemplateRuntimeError, Undefined, escape, identity, internalcode, markup_join, missing, str_join
name = 'notebook/intro.md.j2'

def root(context, missing=missing, environment=environment):
    resolve = context.resolve_or_missing
    undefined = environment.undefined
    concat = environment.concat
    cond_expr_undefined = Undefined
    if 0: yield None
    l_0_experiment = resolve('experiment')
    l_0_platform = resolve('platform')
    l_0_accelerator = resolve('accelerator')
    l_0_open_url = resolve('open_url')
    l_0_target = resolve('target')
    l_0_rerender = resolve('rerender')
    l_0_commands = resolve('commands')
    l_0_program_file_count = resolve('program_file_count')
    l_0_project = resolve('project')
    l_0_packages = resolve('packages')
    l_0_lock = resolve('lock')
    l_0_select = resolve('select')
    l_0_checked = resolve('checked')
    l_0_runtime = resolve('runtime')
    pass
    yield '# '
    yield str(environment.getattr((undefined(name='experiment') if l_0_experiment is missing else l_0_experiment), 'summary'))
    yield ' — '
    yield str(environment.getattr((undefined(name='platform') if l_0_platform is missing else l_0_platform), 'title'))
    yield ', '
    yield str(environment.getattr((undefined(name='accelerator') if l_0_accelerator is missing else l_0_accelerator), 'label'))
    yield '\n\n## 1. What it is\n\n'
    if (undefined(name='open_url') if l_0_open_url is missing else l_0_open_url):
        pass
        yield '[Open in Colab]('
        yield str((undefined(name='open_url') if l_0_open_url is missing else l_0_open_url))
        yield ') · '
    yield 'Rendered by envkit from experiment `'
    yield str(environment.getattr((undefined(name='experiment') if l_0_experiment is missing else l_0_experiment), 'name'))
    yield '` and target `'
    yield str(environment.getattr((undefined(name='target') if l_0_target is missing else l_0_target), 'name'))
    yield '`: do not edit this notebook, re-render it with `'
    yield str((undefined(name='rerender') if l_0_rerender is missing else l_0_rerender))
    yield '`.\n\n| | |\n| --- | --- |\n| what runs | '
    l_1_loop = missing
    for l_1_command, l_1_loop in LoopContext((undefined(name='commands') if l_0_commands is missing else l_0_commands), undefined):
        _loop_vars = {}
        pass
        yield '`'
        yield str(l_1_command)
        yield '`'
        if (not environment.getattr(l_1_loop, 'last')):
            pass
            yield ', then '
    l_1_loop = l_1_command = missing
    yield ' ('
    yield str((undefined(name='program_file_count') if l_0_program_file_count is missing else l_0_program_file_count))
    yield ' '
    if environment.getattr((undefined(name='experiment') if l_0_experiment is missing else l_0_experiment), 'recipe'):
        pass
        yield 'recipe'
    else:
        pass
        yield 'project'
    yield ' files, embedded below with their sha256'
    if (not environment.getattr((undefined(name='experiment') if l_0_experiment is missing else l_0_experiment), 'recipe')):
        pass
        yield "; the command runs from the project's root, `"
        yield str((undefined(name='project') if l_0_project is missing else l_0_project))
        yield '/`'
    yield ') |\n| published setting | '
    yield str((environment.getattr((undefined(name='experiment') if l_0_experiment is missing else l_0_experiment), 'published') or 'none: an envkit experiment'))
    yield ' |\n| accelerator | '
    yield str(environment.getattr((undefined(name='platform') if l_0_platform is missing else l_0_platform), 'title'))
    yield "'s "
    yield str(environment.getattr((undefined(name='accelerator') if l_0_accelerator is missing else l_0_accelerator), 'label'))
    yield ' ('
    yield str(environment.getattr((undefined(name='accelerator') if l_0_accelerator is missing else l_0_accelerator), 'name'))
    yield '; tier: '
    yield str(environment.getattr((undefined(name='accelerator') if l_0_accelerator is missing else l_0_accelerator), 'tier'))
    yield ')'
    if environment.getattr((undefined(name='accelerator') if l_0_accelerator is missing else l_0_accelerator), 'note'):
        pass
        yield ': '
        yield str(environment.getattr((undefined(name='accelerator') if l_0_accelerator is missing else l_0_accelerator), 'note'))
    yield ' |\n| packages | '
    if ((undefined(name='packages') if l_0_packages is missing else l_0_packages) == 'lock'):
        pass
        yield 'a fresh virtual environment holding exactly the lock'
    else:
        pass
        yield "**the runtime's own packages** (the `--use-runtime` variant): the results record how they differ from the lock"
    yield ' |\n| lock | sha256 `'
    yield str(environment.getattr((undefined(name='lock') if l_0_lock is missing else l_0_lock), 'sha256'))
    yield '`: '
    yield str(environment.getattr((undefined(name='lock') if l_0_lock is missing else l_0_lock), 'count'))
    yield ' packages for Python '
    yield str(environment.getattr((undefined(name='lock') if l_0_lock is missing else l_0_lock), 'python'))
    yield ', '
    yield str(environment.getattr((undefined(name='lock') if l_0_lock is missing else l_0_lock), 'platform'))
    yield ' |\n| pins | '
    l_1_loop = missing
    for (l_1_name, l_1_version), l_1_loop in LoopContext(context.call(environment.getattr(context.call(environment.getattr((undefined(name='target') if l_0_target is missing else l_0_target), 'pins')), 'items')), undefined):
        _loop_vars = {}
        pass
        yield str(l_1_name)
        yield ' '
        yield str(l_1_version)
        if (not environment.getattr(l_1_loop, 'last')):
            pass
            yield ', '
    l_1_loop = l_1_name = l_1_version = missing
    yield ' |\n\n**Pick the accelerator:** '
    yield str((undefined(name='select') if l_0_select is missing else l_0_select))
    yield '.\n'
    if (environment.getattr((undefined(name='platform') if l_0_platform is missing else l_0_platform), 'name') == 'kaggle'):
        pass
        yield 'Or push it from a checkout: `envkit launch '
        yield str(environment.getattr((undefined(name='experiment') if l_0_experiment is missing else l_0_experiment), 'name'))
        yield ' --on kaggle --target '
        yield str(environment.getattr((undefined(name='target') if l_0_target is missing else l_0_target), 'name'))
        yield '` (writes `kernel-metadata.json` with `machine_shape` '
        yield str(environment.getattr((undefined(name='accelerator') if l_0_accelerator is missing else l_0_accelerator), 'name'))
        yield ').\n'
    yield '\nThe runtime as envkit last saw it (facts checked '
    yield str((undefined(name='checked') if l_0_checked is missing else l_0_checked))
    yield '; the runtime check below records what this one has):\n\n| | | source |\n| --- | --- | --- |\n'
    for (l_1_name, l_1_fact) in context.call(environment.getattr(environment.getattr((undefined(name='runtime') if l_0_runtime is missing else l_0_runtime), 'facts'), 'items')):
        _loop_vars = {}
        pass
        yield '| '
        yield str(l_1_name)
        yield ' | '
        yield str(environment.getattr(l_1_fact, 'value'))
        yield ' | '
        yield str(context.call(environment.getattr(l_1_fact, 'cite'), _loop_vars=_loop_vars))
        yield ' |\n'
    l_1_name = l_1_fact = missing

blocks = {}
debug_info = '1=26&5=32&9=45&10=71&11=73&12=86&13=93&14=102&16=113&17=115&18=118&21=125&25=127&26=131'
# Generated by scripts/generate_validators.py from templates/notebook/intro.md.j2: do not edit
