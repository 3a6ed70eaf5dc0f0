export const meta = {name: 'const-reassigned', slug: 'const-reassigned', version: '1'};
export default async function (args, g) {
  const tries = 1;
  tries = 2;
  return tries;
}
