-- 024: new jobs enter the two live generations in turn, 30 seconds each.
--
-- twice_jobs_gen() is the generation a job inserted now enters: the 30 s
-- period of the server's clock, even or odd. Every client agrees on it
-- without asking, and the insert pays an expression (the function is
-- inlined). JobRotate (rotate.go) empties the generation that new jobs are
-- not entering: it moves the jobs still in it to the other, then truncates
-- it, which removes the dead row versions every state change left there,
-- whether or not a snapshot held elsewhere still keeps vacuum from
-- removing them. An update keeps a job in its generation; only the move
-- changes it.

CREATE FUNCTION twice_jobs_gen() RETURNS smallint LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT (floor(extract(epoch FROM statement_timestamp()) / 30)::bigint % 2)::smallint
$$;

ALTER TABLE twice_jobs ALTER COLUMN gen SET DEFAULT twice_jobs_gen();
