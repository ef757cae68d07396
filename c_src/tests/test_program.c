/* Programs (core/program.h): planned once, run whole; results against the same ops run one by
 * one; intermediates freed at their last reader; bad programs and bad inputs refused; loops of
 * two programs (cx_program_loop); donated inputs written in place; intermediates placed in an
 * arena kept between runs. */
#include <limits.h>
#include <pthread.h>

#include "test_util.h"

#include "../core/program.h"

static cx_desc vec_desc(cx_dtype t, int64_t n) {
    int64_t shape[1] = {n};
    return tu_desc(t, 1, shape);
}

/* (exp(a) * b + c) summed, with c a constant: the program against cx_run op by op. */
static void test_program_matches_ops(void **state) {
    (void)state;
    cx_device *cpu = tu_cpu();
    const double av[4] = {0, 1, -2, 0.5}, bv[4] = {2, 3, 4, 5}, cv[1] = {1};
    int64_t n4[1] = {4};
    cx_tensor *a = tu_tensor(CX_F32, 1, n4, av), *b = tu_tensor(CX_F32, 1, n4, bv);
    cx_tensor *c = tu_tensor(CX_F32, 0, NULL, cv);
    cx_desc in[2] = {vec_desc(CX_F32, 4), vec_desc(CX_F32, 4)};
    cx_program p;
    cx_status st = {0};
    cx_params none = {0};
    assert_int_equal(cx_program_init(&p, cpu, in, 2, &c->desc, 1, &st), CX_OK);
    int s0[1] = {0};
    int e = cx_program_add(&p, CX_OP_EXP, s0, 1, &none, &st);
    assert_int_equal(e, 3);
    int s1[2] = {e, 1};
    int m = cx_program_add(&p, CX_OP_MULTIPLY, s1, 2, &none, &st);
    int s2[2] = {m, 2};
    int sum_in = cx_program_add(&p, CX_OP_ADD, s2, 2, &none, &st);
    int s3[1] = {sum_in};
    int total = cx_program_add(&p, CX_OP_SUM, s3, 1, &none, &st);
    assert_int_equal(total, 6);
    int outs[2] = {total, m};
    assert_int_equal(cx_program_finish(&p, outs, 2, &st), CX_OK);
    /* exp's result dies after the multiply; the add's after the sum; the multiply's is returned */
    assert_int_equal(p.steps[1].n_drop, 1);
    assert_int_equal(p.steps[1].drop[0], e);
    assert_int_equal(p.steps[3].n_drop, 1);
    assert_int_equal(p.steps[3].drop[0], sum_in);
    assert_int_equal(p.steps[2].n_drop, 0);

    cx_tensor out[2];
    cx_tensor *inputs[2] = {a, b}, *consts[1] = {c};
    int64_t live = atomic_load(&cpu->live_bytes);
    assert_int_equal(cx_program_run(&p, inputs, consts, out, &st), CX_OK);
    /* only the two results are left, and the arena kept for the next run (exp's and the add's
     * results, whose lives do not meet, share its bytes) */
    assert_int_equal(p.offset[0], 0);
    assert_int_equal(p.offset[2], 0);
    assert_int_equal(p.offset[1], -1); /* returned */
    assert_non_null(p.arena);
    assert_int_equal(p.arena->bytes, 64);
    assert_int_equal(atomic_load(&cpu->live_bytes) - live, 4 + 16 + 64);

    cx_tensor *ea = tu_run_ok(CX_OP_EXP, &a, 1, NULL);
    cx_tensor *mb[2] = {ea, b};
    cx_tensor *mm = tu_run_ok(CX_OP_MULTIPLY, mb, 2, NULL);
    cx_tensor *ac[2] = {mm, c};
    cx_tensor *ad = tu_run_ok(CX_OP_ADD, ac, 2, NULL);
    cx_tensor *su = tu_run_ok(CX_OP_SUM, &ad, 1, NULL);
    double want_sum = tu_load(CX_F32, su->data, 0), want_m[4];
    for (int i = 0; i < 4; i++) want_m[i] = tu_load(CX_F32, mm->data, i);
    tu_expect(&out[0], CX_F32, 0, NULL, &want_sum, 0);
    tu_expect(&out[1], CX_F32, 1, n4, want_m, 0);

    /* a second run gives the same */
    cx_tensor again[2];
    assert_int_equal(cx_program_run(&p, inputs, consts, again, &st), CX_OK);
    tu_expect(&again[0], CX_F32, 0, NULL, &want_sum, 0);
    for (int k = 0; k < 2; k++) {
        cx_tensor_free(&out[k]);
        cx_tensor_free(&again[k]);
    }
    cx_program_free(&p);
    tu_drop(ea);
    tu_drop(mm);
    tu_drop(ad);
    tu_drop(su);
    tu_drop(a);
    tu_drop(b);
    tu_drop(c);
}

static void test_program_refuses_bad_steps(void **state) {
    (void)state;
    cx_device *cpu = tu_cpu();
    cx_desc in[2] = {vec_desc(CX_F32, 4), vec_desc(CX_F32, 3)};
    cx_program p;
    cx_status st = {0};
    cx_params none = {0};
    assert_int_equal(cx_program_init(&p, cpu, in, 2, NULL, 0, &st), CX_OK);
    /* a slot not yet written */
    int future[1] = {2};
    assert_int_equal(cx_program_add(&p, CX_OP_EXP, future, 1, &none, &st), -1);
    assert_non_null(strstr(st.message, "not yet written"));
    /* shapes that do not broadcast: the op's own message */
    int both[2] = {0, 1};
    assert_int_equal(cx_program_add(&p, CX_OP_ADD, both, 2, &none, &st), -1);
    assert_int_equal(st.code, CX_EINVAL);
    int ok = cx_program_add(&p, CX_OP_EXP, both, 1, &none, &st);
    assert_int_equal(ok, 2);
    /* results must be step slots, each once */
    int bad_out[1] = {0};
    assert_int_equal(cx_program_finish(&p, bad_out, 1, &st), CX_EINVAL);
    int twice[2] = {2, 2};
    assert_int_equal(cx_program_finish(&p, twice, 2, &st), CX_EINVAL);
    int good[1] = {2};
    assert_int_equal(cx_program_finish(&p, good, 1, &st), CX_OK);
    assert_int_equal(cx_program_add(&p, CX_OP_EXP, good, 1, &none, &st), -1);
    cx_program_free(&p);
}

static void test_program_checks_inputs(void **state) {
    (void)state;
    cx_device *cpu = tu_cpu();
    cx_desc in[1] = {vec_desc(CX_F32, 4)};
    cx_program p;
    cx_status st = {0};
    cx_params none = {0};
    assert_int_equal(cx_program_init(&p, cpu, in, 1, NULL, 0, &st), CX_OK);
    int s0[1] = {0};
    int r = cx_program_add(&p, CX_OP_NEGATE, s0, 1, &none, &st);
    assert_int_equal(cx_program_finish(&p, &r, 1, &st), CX_OK);
    const double v3[3] = {1, 2, 3}, v4[4] = {1, 2, 3, 4};
    int64_t n3[1] = {3}, n4[1] = {4};
    cx_tensor *x3 = tu_tensor(CX_F32, 1, n3, v3), *x4d = tu_tensor(CX_F64, 1, n4, v4);
    cx_tensor *x4 = tu_tensor(CX_F32, 1, n4, v4);
    cx_tensor out;
    assert_int_equal(cx_program_run(&p, &x3, NULL, &out, &st), CX_EINVAL);
    assert_non_null(strstr(st.message, "input 0"));
    assert_int_equal(cx_program_run(&p, &x4d, NULL, &out, &st), CX_EINVAL);
    /* a freed input fails the step that reads it, and leaves nothing behind */
    cx_tensor_free(x4);
    int64_t live = atomic_load(&cpu->live_bytes);
    assert_int_equal(cx_program_run(&p, &x4, NULL, &out, &st), CX_EFREED);
    assert_int_equal(atomic_load(&cpu->live_bytes), live);
    free(x4);
    tu_drop(x3);
    tu_drop(x4d);
    cx_program_free(&p);
}

/* A step that fails in the middle of a run frees what the earlier steps made. */
static void test_program_failure_frees(void **state) {
    (void)state;
    cx_device *cpu = tu_cpu();
    cx_desc in[2] = {vec_desc(CX_S64, 3), vec_desc(CX_F32, 4)};
    cx_program p;
    cx_status st = {0};
    cx_params none = {0}, take = {0};
    cx_param_put_int(&take, CX_P_AXIS, 0);
    assert_int_equal(cx_program_init(&p, cpu, in, 2, NULL, 0, &st), CX_OK);
    int s1[1] = {1};
    int neg = cx_program_add(&p, CX_OP_NEGATE, s1, 1, &none, &st);
    assert_true(neg >= 0);
    int tk[2] = {neg, 0};
    int r = cx_program_add(&p, CX_OP_TAKE, tk, 2, &take, &st);
    assert_true(r >= 0);
    int outs[2] = {neg, r};
    assert_int_equal(cx_program_finish(&p, outs, 2, &st), CX_OK);
    const double idx[3] = {0, 7, 1}, v[4] = {1, 2, 3, 4};
    int64_t n3[1] = {3}, n4[1] = {4};
    cx_tensor *i = tu_tensor(CX_S64, 1, n3, idx), *x = tu_tensor(CX_F32, 1, n4, v);
    cx_tensor *inputs[2] = {i, x}, out[2];
    int64_t live = atomic_load(&cpu->live_bytes);
    assert_int_equal(cx_program_run(&p, inputs, NULL, out, &st), CX_EINVAL);
    assert_int_equal(atomic_load(&cpu->live_bytes), live);
    assert_null(out[0].data);
    tu_drop(i);
    tu_drop(x);
    cx_program_free(&p);
}

/* transpose(dot(a, b)) runs as dot(b, a): the same numbers, one step fewer */
static void test_program_folds_transposed_dot(void **state) {
    (void)state;
    cx_device *cpu = tu_cpu();
    int64_t sa[2] = {3, 2}, sb[2] = {3, 4};
    double av[6], bv[12];
    for (int i = 0; i < 6; i++) av[i] = i * 0.5 - 1;
    for (int i = 0; i < 12; i++) bv[i] = 2 - i * 0.25;
    cx_tensor *a = tu_tensor(CX_F32, 2, sa, av), *b = tu_tensor(CX_F32, 2, sb, bv);
    cx_desc in[2] = {a->desc, b->desc};
    cx_params dot = {0}, tr = {0}, none = {0};
    cx_param_put_ints(&dot, CX_P_CONTRACT_A, (int64_t[]){0}, 1);
    cx_param_put_ints(&dot, CX_P_CONTRACT_B, (int64_t[]){0}, 1);
    cx_param_put_ints(&tr, CX_P_AXES, (int64_t[]){1, 0}, 2);
    for (int returned = 0; returned < 2; returned++) {
        cx_program p;
        cx_status st = {0};
        assert_int_equal(cx_program_init(&p, cpu, in, 2, NULL, 0, &st), CX_OK);
        int ab[2] = {0, 1};
        int d = cx_program_add(&p, CX_OP_DOT, ab, 2, &dot, &st);      /* {2, 4} */
        int t = cx_program_add(&p, CX_OP_TRANSPOSE, &d, 1, &tr, &st); /* {4, 2} */
        int n = cx_program_add(&p, CX_OP_NEGATE, &t, 1, &none, &st);
        int outs[2] = {n, d};
        assert_int_equal(cx_program_finish(&p, outs, returned ? 2 : 1, &st), CX_OK);
        /* folded only when nothing else needs the dot's own result */
        assert_int_equal(p.steps[0].dead, !returned);
        assert_int_equal(p.steps[1].plan.op, returned ? CX_OP_TRANSPOSE : CX_OP_DOT);
        cx_tensor *inputs[2] = {a, b}, res[2];
        assert_int_equal(cx_program_run(&p, inputs, NULL, res, &st), CX_OK);
        double want[8];
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 2; j++) {
                double acc = 0;
                for (int r = 0; r < 3; r++) acc += av[r * 2 + j] * bv[r * 4 + i];
                want[i * 2 + j] = -acc;
            }
        int64_t shape[2] = {4, 2};
        tu_expect(&res[0], CX_F32, 2, shape, want, 1e-6);
        for (int k = 0; k < (returned ? 2 : 1); k++) cx_tensor_free(&res[k]);
        cx_program_free(&p);
    }
    tu_drop(a);
    tu_drop(b);
}

/* An as_type to the type a value already has is the value: its readers read the value itself
 * and the step does not run; one to another type stays, and so does one the program returns. */
static void test_program_folds_identity_casts(void **state) {
    (void)state;
    cx_device *cpu = tu_cpu();
    int64_t shape[1] = {4};
    double av[4] = {1.5, -2, 0.25, 3};
    cx_tensor *a = tu_tensor(CX_F32, 1, shape, av);
    cx_params f32 = {0}, f64 = {0}, none = {0};
    cx_param_put_int(&f32, CX_P_TYPE, CX_F32);
    cx_param_put_int(&f64, CX_P_TYPE, CX_F64);
    for (int returned = 0; returned < 2; returned++) {
        cx_program p;
        cx_status st = {0};
        assert_int_equal(cx_program_init(&p, cpu, &a->desc, 1, NULL, 0, &st), CX_OK);
        int zero = 0;
        int c = cx_program_add(&p, CX_OP_AS_TYPE, &zero, 1, &f32, &st); /* f32 -> f32 */
        int c2 = cx_program_add(&p, CX_OP_AS_TYPE, &c, 1, &f32, &st);   /* again */
        int n = cx_program_add(&p, CX_OP_NEGATE, &c2, 1, &none, &st);
        int w = cx_program_add(&p, CX_OP_AS_TYPE, &n, 1, &f64, &st); /* f32 -> f64 */
        int outs[2] = {w, c};
        assert_true(w >= 0);
        assert_int_equal(cx_program_finish(&p, outs, returned ? 2 : 1, &st), CX_OK);
        assert_int_equal(p.steps[0].dead, !returned);
        assert_true(p.steps[1].dead);
        /* the negate reads the input, or the first cast where that is returned */
        assert_int_equal(p.steps[2].in[0], returned ? c : 0);
        assert_false(p.steps[3].dead);
        cx_tensor *inputs[1] = {a}, res[2];
        assert_int_equal(cx_program_run(&p, inputs, NULL, res, &st), CX_OK);
        double want[4];
        for (int i = 0; i < 4; i++) want[i] = -av[i];
        tu_expect(&res[0], CX_F64, 1, shape, want, 0);
        if (returned) tu_expect(&res[1], CX_F32, 1, shape, av, 0);
        for (int k = 0; k < (returned ? 2 : 1); k++) cx_tensor_free(&res[k]);
        cx_program_free(&p);
    }
    tu_drop(a);
}

/* The loop's programs: state (a f32[2], i s32 scalar, w f32[2]); cond: i < limit (a constant);
 * body: (a + w, i + 1, w), w passed through (pick -3). */
typedef struct {
    cx_program cond, body;
    cx_tensor *limit, *one;
} loop_progs;

static void loop_build(loop_progs *lp, double limit) {
    cx_device *cpu = tu_cpu();
    cx_status st = {0};
    cx_params none = {0};
    const double lv[1] = {limit}, ov[1] = {1};
    lp->limit = tu_tensor(CX_S32, 0, NULL, lv);
    lp->one = tu_tensor(CX_S32, 0, NULL, ov);
    cx_desc in[3] = {vec_desc(CX_F32, 2), tu_desc(CX_S32, 0, NULL), vec_desc(CX_F32, 2)};
    assert_int_equal(cx_program_init(&lp->cond, cpu, in, 3, &lp->limit->desc, 1, &st), CX_OK);
    int less_in[2] = {1, 3};
    int pred = cx_program_add(&lp->cond, CX_OP_LESS, less_in, 2, &none, &st);
    assert_int_equal(cx_program_finish(&lp->cond, &pred, 1, &st), CX_OK);
    assert_int_equal(cx_program_init(&lp->body, cpu, in, 3, &lp->one->desc, 1, &st), CX_OK);
    int add_a[2] = {0, 2}, add_i[2] = {1, 3};
    int outs[2];
    outs[0] = cx_program_add(&lp->body, CX_OP_ADD, add_a, 2, &none, &st);
    outs[1] = cx_program_add(&lp->body, CX_OP_ADD, add_i, 2, &none, &st);
    assert_int_equal(cx_program_finish(&lp->body, outs, 2, &st), CX_OK);
}

static void loop_drop(loop_progs *lp) {
    cx_program_free(&lp->cond);
    cx_program_free(&lp->body);
    tu_drop(lp->limit);
    tu_drop(lp->one);
}

static void loop_release(cx_tensor **state, bool *owned, int n) {
    for (int k = 0; k < n; k++) {
        bool seen = false;
        for (int j = 0; j < k; j++) seen |= owned[j] && state[j] == state[k];
        if (owned[k] && !seen) {
            cx_tensor_free(state[k]);
            free(state[k]);
        }
    }
}

/* cx_program_loop: to the end in one call, or a turn a call; no turn when the condition is false
 * at once; the values it made freed as the state moves on (the sanitizer and valgrind builds
 * find a leak or a double free); bad picks and a predicate of several elements refused. */
static void test_program_loop(void **state_) {
    (void)state_;
    cx_device *cpu = tu_cpu();
    cx_status st = {0};
    loop_progs lp;
    loop_build(&lp, 3);
    const double av[2] = {1, -5}, iv[1] = {0}, wv[2] = {0.5, 2};
    cx_tensor *a = tu_vec(CX_F32, 2, av), *i = tu_tensor(CX_S32, 0, NULL, iv);
    cx_tensor *w = tu_vec(CX_F32, 2, wv);
    int picks[3] = {0, 1, -3};
    const double want_a[2] = {2.5, 1}, want_i[1] = {3};
    int64_t n2[1] = {2};
    for (int64_t chunk = 1; chunk <= 100; chunk *= 100) {
        cx_tensor *s[3] = {a, i, w};
        bool owned[3] = {false, false, false}, done = false;
        int64_t live = atomic_load(&cpu->live_bytes);
        int calls = 0;
        while (!done) {
            assert_int_equal(cx_program_loop(&lp.cond, &lp.limit, 0, &lp.body, &lp.one, picks, 3, s,
                                             owned, chunk, &done, &st),
                             CX_OK);
            calls++;
        }
        assert_int_equal(calls, chunk == 1 ? 4 : 1);
        tu_expect(s[0], CX_F32, 1, n2, want_a, 0);
        tu_expect(s[1], CX_S32, 0, NULL, want_i, 0);
        assert_true(owned[0] && owned[1] && !owned[2] && s[2] == w);
        /* only the state reached is left */
        assert_int_equal(atomic_load(&cpu->live_bytes) - live, 8 + 4);
        loop_release(s, owned, 3);
        assert_int_equal(atomic_load(&cpu->live_bytes), live);
    }
    /* no turn */
    loop_progs none;
    loop_build(&none, 0);
    cx_tensor *s[3] = {a, i, w};
    bool owned[3] = {false, false, false}, done = false;
    assert_int_equal(cx_program_loop(&none.cond, &none.limit, 0, &none.body, &none.one, picks, 3, s,
                                     owned, 100, &done, &st),
                     CX_OK);
    assert_true(done && s[0] == a && s[1] == i && s[2] == w && !owned[0] && !owned[1]);
    /* bad picks */
    int bad[3] = {0, 2, -3};
    assert_int_equal(cx_program_loop(&lp.cond, &lp.limit, 0, &lp.body, &lp.one, bad, 3, s, owned,
                                     100, &done, &st),
                     CX_EINVAL);
    assert_int_equal(cx_program_loop(&lp.cond, &lp.limit, 1, &lp.body, &lp.one, picks, 3, s, owned,
                                     100, &done, &st),
                     CX_EINVAL);
    /* a pick whose negation overflows */
    assert_int_equal(cx_program_loop(&lp.cond, &lp.limit, INT_MIN, &lp.body, &lp.one, picks, 3, s,
                                     owned, 100, &done, &st),
                     CX_EINVAL);
    /* the predicate is the state's w (two elements, pick -3): refused, the state as it was */
    assert_int_equal(cx_program_loop(&lp.cond, &lp.limit, -3, &lp.body, &lp.one, picks, 3, s, owned,
                                     100, &done, &st),
                     CX_EINVAL);
    assert_non_null(strstr(st.message, "2 elements"));
    assert_true(s[0] == a && !owned[0]);
    loop_drop(&none);
    loop_drop(&lp);
    tu_drop(a);
    tu_drop(i);
    tu_drop(w);
}

/* One result picked twice: (x, y) -> (x + y, x + y) until the first element passes 10; the
 * shared value is freed once, and NaN is a true predicate, -0 a false one. */
static void test_program_loop_shared_and_truth(void **state_) {
    (void)state_;
    cx_device *cpu = tu_cpu();
    cx_status st = {0};
    cx_params none = {0};
    cx_desc in[2] = {tu_desc(CX_F32, 0, NULL), tu_desc(CX_F32, 0, NULL)};
    const double ten[1] = {10};
    cx_tensor *c10 = tu_tensor(CX_F32, 0, NULL, ten);
    cx_program cond, body;
    assert_int_equal(cx_program_init(&cond, cpu, in, 2, &c10->desc, 1, &st), CX_OK);
    int lt[2] = {0, 2};
    int pred = cx_program_add(&cond, CX_OP_LESS, lt, 2, &none, &st);
    assert_int_equal(cx_program_finish(&cond, &pred, 1, &st), CX_OK);
    assert_int_equal(cx_program_init(&body, cpu, in, 2, NULL, 0, &st), CX_OK);
    int xy[2] = {0, 1};
    int sum = cx_program_add(&body, CX_OP_ADD, xy, 2, &none, &st);
    assert_int_equal(cx_program_finish(&body, &sum, 1, &st), CX_OK);
    const double one[1] = {1};
    cx_tensor *x = tu_tensor(CX_F32, 0, NULL, one), *y = tu_tensor(CX_F32, 0, NULL, one);
    cx_tensor *s[2] = {x, y};
    bool owned[2] = {false, false}, done = false;
    int picks[2] = {0, 0};
    int64_t live = atomic_load(&cpu->live_bytes);
    assert_int_equal(
        cx_program_loop(&cond, &c10, 0, &body, NULL, picks, 2, s, owned, 100, &done, &st), CX_OK);
    /* 1+1 = 2, 4, 8, 16 */
    const double want[1] = {16};
    assert_true(done && s[0] == s[1] && owned[0] && owned[1]);
    tu_expect(s[0], CX_F32, 0, NULL, want, 0);
    loop_release(s, owned, 2);
    assert_int_equal(atomic_load(&cpu->live_bytes), live);

    /* the predicate as the state itself (pick -1): NaN runs a turn, -0 none */
    const double nan_v[1] = {NAN}, mzero[1] = {-0.0};
    for (int k = 0; k < 2; k++) {
        cx_tensor *p = tu_tensor(CX_F32, 0, NULL, k == 0 ? nan_v : mzero);
        cx_tensor *ps[2] = {p, y};
        bool po[2] = {false, false};
        int keep[2] = {-1, -2};
        assert_int_equal(
            cx_program_loop(&cond, &c10, -1, &body, NULL, keep, 2, ps, po, 1, &done, &st), CX_OK);
        assert_int_equal(done, k == 1);
        tu_drop(p);
    }
    cx_program_free(&cond);
    cx_program_free(&body);
    tu_drop(c10);
    tu_drop(x);
    tu_drop(y);
}

/* Donated inputs (cx_program_donate): x - exp(y) writes into x's buffer, x freed; not when x is
 * pinned (an op elsewhere reads it) nor when it is also the run's other input; a slot that is
 * not an input refused. */
static void test_program_donated_input(void **state_) {
    (void)state_;
    cx_device *cpu = tu_cpu();
    cx_status st = {0};
    cx_params none = {0};
    cx_desc in[2] = {vec_desc(CX_F32, 4), vec_desc(CX_F32, 4)};
    cx_program p;
    assert_int_equal(cx_program_init(&p, cpu, in, 2, NULL, 0, &st), CX_OK);
    int y[1] = {1};
    int e = cx_program_add(&p, CX_OP_EXP, y, 1, &none, &st);
    int xe[2] = {0, e};
    int r = cx_program_add(&p, CX_OP_SUBTRACT, xe, 2, &none, &st);
    int bad[1] = {2};
    assert_int_equal(cx_program_donate(&p, bad, 1, &st), CX_EINVAL);
    int donate[1] = {0};
    assert_int_equal(cx_program_donate(&p, donate, 1, &st), CX_OK);
    assert_int_equal(cx_program_finish(&p, &r, 1, &st), CX_OK);
    assert_int_equal(p.steps[1].alias, 1);
    assert_int_equal(p.steps[0].alias, 0);

    const double xv[4] = {1, 2, 3, 4}, yv[4] = {0, 0, 1, -1};
    double want[4];
    for (int i = 0; i < 4; i++) want[i] = (double)((float)xv[i] - expf((float)yv[i]));
    int64_t n4[1] = {4};
    for (int mode = 0; mode < 3; mode++) {
        cx_tensor *x = tu_vec(CX_F32, 4, xv), *yt = tu_vec(CX_F32, 4, yv);
        void *buffer = x->data;
        if (mode == 1) assert_int_equal(cx_tensor_pin(x, &st), CX_OK);
        cx_tensor *inputs[2] = {x, mode == 2 ? x : yt};
        cx_tensor out;
        int64_t live = atomic_load(&cpu->live_bytes);
        assert_int_equal(cx_program_run(&p, inputs, NULL, &out, &st), CX_OK);
        if (mode == 0) {
            /* the result is x's buffer: nothing new is left */
            assert_ptr_equal(out.data, buffer);
            assert_true(cx_tensor_is_freed(x));
            assert_int_equal(atomic_load(&cpu->live_bytes), live);
            tu_expect(&out, CX_F32, 1, n4, want, 0);
        } else {
            assert_ptr_not_equal(out.data, buffer);
            assert_false(cx_tensor_is_freed(x));
            double same[4];
            for (int i = 0; i < 4; i++) same[i] = (double)((float)xv[i] - expf((float)xv[i]));
            tu_expect(&out, CX_F32, 1, n4, mode == 2 ? same : want, 0);
        }
        if (mode == 1) cx_tensor_unpin(x);
        cx_tensor_free(&out);
        tu_drop(x);
        tu_drop(yt);
    }
    cx_program_free(&p);
}

/* What the arena plan promises: two values whose lives meet never share a byte. */
static void expect_disjoint_lives(const cx_program *p) {
    int first = p->n_inputs + p->n_consts;
    int *last = malloc(sizeof(int) * (size_t)p->n_steps);
    for (int k = 0; k < p->n_steps; k++) last[k] = k;
    for (int k = 0; k < p->n_steps; k++)
        for (int j = 0; j < p->steps[k].n_in && !p->steps[k].dead; j++)
            if (p->steps[k].in[j] >= first) last[p->steps[k].in[j] - first] = k;
    for (int a = 0; a < p->n_steps; a++) {
        if (p->offset[a] < 0) continue;
        int64_t a_end =
            p->offset[a] + (int64_t)(cx_desc_numel(&p->steps[a].plan.out) *
                                     (int64_t)cx_dtype_size(p->steps[a].plan.out.dtype));
        assert_true(a_end <= (int64_t)p->arena->bytes);
        assert_int_equal(p->offset[a] % 64, 0);
        for (int b = a + 1; b < p->n_steps; b++) {
            if (p->offset[b] < 0 || b > last[a]) continue; /* b is written after a's last read */
            int64_t b_end =
                p->offset[b] + (int64_t)(cx_desc_numel(&p->steps[b].plan.out) *
                                         (int64_t)cx_dtype_size(p->steps[b].plan.out.dtype));
            assert_true(a_end <= p->offset[b] || b_end <= p->offset[a]);
        }
    }
    free(last);
}

/* A random program of elementwise steps over vectors of three lengths (each step reads one or
 * two earlier values of its length, or a constant), its results some of the values: what runs
 * in the arena equals the same ops run one by one, run after run, and the plan keeps every pair
 * of values alive at once apart. */
typedef struct {
    cx_program *p;
    cx_tensor **inputs;
    int n_out;
    const double *want; /* the results' elements, one after another */
    int64_t *lens;
    int ok;
} arena_run;

static void *arena_worker(void *arg) {
    arena_run *r = arg;
    r->ok = 1;
    for (int turn = 0; turn < 20 && r->ok; turn++) {
        cx_tensor out[8];
        cx_status st = {0};
        if (cx_program_run(r->p, r->inputs, NULL, out, &st) != CX_OK) {
            r->ok = 0;
            break;
        }
        const double *w = r->want;
        for (int k = 0; k < r->n_out; k++) {
            for (int64_t i = 0; i < r->lens[k]; i++)
                if (tu_load(CX_F32, out[k].data, i) != w[i]) r->ok = 0;
            w += r->lens[k];
            cx_tensor_free(&out[k]);
        }
    }
    return NULL;
}

static void test_program_arena(void **state_) {
    (void)state_;
    cx_device *cpu = tu_cpu();
    cx_status st = {0};
    cx_params none = {0};
    const int64_t sizes[3] = {1000, 70000, 300000}; /* small, cached, mapped buffers */
    unsigned seed = 12345;
    for (int trial = 0; trial < 6; trial++) {
        cx_desc in[3];
        for (int k = 0; k < 3; k++) in[k] = vec_desc(CX_F32, sizes[k]);
        cx_program p;
        assert_int_equal(cx_program_init(&p, cpu, in, 3, NULL, 0, &st), CX_OK);
        /* slot -> which length; op-by-op values */
        int kind[64];
        cx_tensor *val[64];
        double *xs[3];
        for (int k = 0; k < 3; k++) {
            kind[k] = k;
            xs[k] = malloc(sizeof(double) * (size_t)sizes[k]);
            for (int64_t i = 0; i < sizes[k]; i++)
                xs[k][i] = (double)((i * 7 + k) % 13) / 8.0 - 0.7;
            val[k] = tu_vec(CX_F32, sizes[k], xs[k]);
        }
        int n_slots = 3;
        const cx_op_id unary[3] = {CX_OP_TANH, CX_OP_NEGATE, CX_OP_SIN};
        const cx_op_id binary[3] = {CX_OP_ADD, CX_OP_MULTIPLY, CX_OP_SUBTRACT};
        for (int step = 0; step < 40; step++) {
            seed = seed * 1103515245u + 12345u;
            int a = (int)((seed >> 8) % (unsigned)n_slots);
            int want_kind = kind[a];
            seed = seed * 1103515245u + 12345u;
            int b = -1;
            for (int tries = 0; tries < 8 && b < 0; tries++) {
                int c = (int)((seed >> (tries + 4)) % (unsigned)n_slots);
                if (kind[c] == want_kind) b = c;
            }
            int ins[2] = {a, b};
            cx_op_id op =
                (seed >> 20) & 1 && b >= 0 ? binary[(seed >> 21) % 3] : unary[(seed >> 21) % 3];
            int n_in = cx_op_tensor_arity(op) == 2 ? 2 : 1;
            int slot = cx_program_add(&p, op, ins, n_in, &none, &st);
            assert_int_equal(slot, n_slots);
            cx_tensor *args[2] = {val[a], n_in == 2 ? val[b] : NULL};
            val[slot] = tu_run_ok(op, args, n_in, NULL);
            kind[slot] = want_kind;
            n_slots++;
        }
        /* results: the last value and two picked along the way */
        int outs[3] = {n_slots - 1, 3 + (int)(seed % 20), 23 + (int)((seed >> 5) % 16)};
        int n_out = outs[1] == outs[2] ? 2 : 3;
        assert_int_equal(cx_program_finish(&p, outs, n_out, &st), CX_OK);
        expect_disjoint_lives(&p);
        assert_non_null(p.arena);
        assert_true(p.arena->bytes > 0);
        int64_t lens[3], total = 0;
        for (int k = 0; k < n_out; k++) total += lens[k] = sizes[kind[outs[k]]];
        double *want = malloc(sizeof(double) * (size_t)total), *w = want;
        for (int k = 0; k < n_out; k++)
            for (int64_t i = 0; i < lens[k]; i++) *w++ = tu_load(CX_F32, val[outs[k]]->data, i);

        size_t idle = cx_program_idle_arena_bytes();
        arena_run runs[2];
        for (int t = 0; t < 2; t++) runs[t] = (arena_run){&p, val, n_out, want, lens, 0};
        /* one thread, then two at once (one of them makes a block of its own) */
        arena_worker(&runs[0]);
        assert_true(runs[0].ok);
        assert_int_equal(cx_program_idle_arena_bytes(), idle + p.arena->bytes);
        pthread_t th[2];
        for (int t = 0; t < 2; t++)
            assert_int_equal(pthread_create(&th[t], NULL, arena_worker, &runs[t]), 0);
        for (int t = 0; t < 2; t++) pthread_join(th[t], NULL);
        assert_true(runs[0].ok && runs[1].ok);
        assert_int_equal(cx_program_idle_arena_bytes(), idle + p.arena->bytes);
        int64_t live = atomic_load(&cpu->live_bytes);
        size_t bytes = p.arena->bytes;
        cx_program_free(&p);
        assert_int_equal(cx_program_idle_arena_bytes(), idle);
        assert_int_equal(atomic_load(&cpu->live_bytes), live - (int64_t)bytes);
        for (int k = 0; k < n_slots; k++) tu_drop(val[k]);
        for (int k = 0; k < 3; k++) free(xs[k]);
        free(want);
    }
}

/* With the cap at three blocks, four programs run in turn keep the blocks of the last three:
 * the one given back longest ago is freed (a process that loads many models keeps the arenas of
 * those it runs now), and running it again frees the next oldest. */
static void test_program_arena_cap(void **state_) {
    (void)state_;
    cx_device *cpu = tu_cpu();
    cx_status st = {0};
    cx_params none = {0};
    cx_desc in[1] = {vec_desc(CX_F32, 4096)};
    cx_program p[4];
    for (int k = 0; k < 4; k++) {
        assert_int_equal(cx_program_init(&p[k], cpu, in, 1, NULL, 0, &st), CX_OK);
        int x[1] = {0};
        int e = cx_program_add(&p[k], CX_OP_EXP, x, 1, &none, &st);
        int t = cx_program_add(&p[k], CX_OP_TANH, &e, 1, &none, &st);
        int r = cx_program_add(&p[k], CX_OP_NEGATE, &t, 1, &none, &st);
        assert_int_equal(cx_program_finish(&p[k], &r, 1, &st), CX_OK);
        assert_int_equal(p[k].arena->bytes, 2 * 4096 * sizeof(float));
    }
    size_t idle = cx_program_idle_arena_bytes(), block = p[0].arena->bytes;
    size_t old = cx_program_arena_cap(idle + 3 * block);
    double v[4096];
    for (int i = 0; i < 4096; i++) v[i] = (i % 17) / 9.0;
    cx_tensor *x = tu_vec(CX_F32, 4096, v);
    int order[5] = {0, 1, 2, 3, 0};
    for (int step = 0; step < 5; step++) {
        cx_tensor out;
        assert_int_equal(cx_program_run(&p[order[step]], &x, NULL, &out, &st), CX_OK);
        cx_tensor_free(&out);
        assert_true(cx_program_idle_arena_bytes() <= idle + 3 * block);
    }
    /* kept: 2, 3, 0 (run last); 1 was the oldest when 0 came back */
    assert_non_null(p[0].arena->kept);
    assert_null(p[1].arena->kept);
    assert_non_null(p[2].arena->kept);
    assert_non_null(p[3].arena->kept);
    assert_int_equal(cx_program_idle_arena_bytes(), idle + 3 * block);
    for (int k = 0; k < 4; k++) cx_program_free(&p[k]);
    assert_int_equal(cx_program_idle_arena_bytes(), idle);
    cx_program_arena_cap(old);
    tu_drop(x);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_program_matches_ops),
        cmocka_unit_test(test_program_refuses_bad_steps),
        cmocka_unit_test(test_program_checks_inputs),
        cmocka_unit_test(test_program_failure_frees),
        cmocka_unit_test(test_program_folds_transposed_dot),
        cmocka_unit_test(test_program_folds_identity_casts),
        cmocka_unit_test(test_program_loop),
        cmocka_unit_test(test_program_loop_shared_and_truth),
        cmocka_unit_test(test_program_donated_input),
        cmocka_unit_test(test_program_arena),
        cmocka_unit_test(test_program_arena_cap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
