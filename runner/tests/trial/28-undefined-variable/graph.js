export const meta = {name: 'undefined-variable', slug: 'undefined-variable', version: '1'};
export default async function (args, g) {
  const total = 3;
  return totl + 1;
}
